"""A Ctrl-C re-delivery and the end of ``safe_interrupts`` are atomic: a re-delivery
already under way is raised by the block, never handed to the restored handler as a second one,
and the block's handler is put back even then. A re-delivery is never lost."""

import os
import signal
import sys
import threading
import time

import pytest

import jaxfeed.recipes.interrupt as interrupt


def __del__():  # a frame that looks like a finaliser's: the handler defers the interrupt
    return sys._getframe()


def test_a_redelivery_racing_the_block_exit_is_raised_once_by_the_block(monkeypatch):
    exited = threading.Event()
    real_kill = interrupt.os.kill

    def slow_kill(pid, signum):  # the timer passed its check; the block exits meanwhile
        ours = signal.getsignal(signal.SIGINT)
        end = time.monotonic() + 0.5
        while signal.getsignal(signal.SIGINT) is ours and time.monotonic() < end:
            time.sleep(0.005)  # until the block restored the previous handler (or 0.5 s)
        real_kill(pid, signum)

    monkeypatch.setattr(interrupt.os, "kill", slow_kill)
    received = []

    def restored(*args):  # the handler the block must put back
        received.append(args)

    previous = signal.signal(signal.SIGINT, restored)
    try:
        with pytest.raises(KeyboardInterrupt), interrupt.safe_interrupts():
            signal.getsignal(signal.SIGINT)(signal.SIGINT, __del__())  # Ctrl-C in a __del__
            threading.Timer(0.05, exited.set).start()
            exited.wait(2)  # the re-delivery is sent while the block is still active...
            # ...and the block ends before the signal reached the handler
        assert signal.getsignal(signal.SIGINT) is restored  # put back even so
        for _ in range(50):  # anything still pending would reach the restored handler now
            threading.Event().wait(0.01)
        assert received == []
    finally:
        signal.signal(signal.SIGINT, previous)


def _callback(seconds):  # named like a weakref callback: Ctrl-C waits until it returned
    os.kill(os.getpid(), signal.SIGINT)
    end = time.monotonic() + seconds
    while time.monotonic() < end:  # every re-delivery (each 20 ms) lands in here again
        time.sleep(0.005)
    return "finished"


def test_a_redelivery_landing_in_a_cleanup_again_is_redelivered_again():
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt), interrupt.safe_interrupts():
        assert _callback(0.3) == "finished"
        time.sleep(5)  # the Ctrl-C is raised here, not lost
    assert signal.getsignal(signal.SIGINT) is before
