"""A chat template rendered in a process of its own, with bounds: the script that
:func:`jaxfeed.recipes.serving.hub_generate.render_chats` runs (``python -P chat_sandbox.py``).

A chat template is code from a downloaded checkpoint. jinja2's immutable sandbox keeps it from
reaching Python, but not from spending time or memory: a 60-byte template can loop for hours
or render gigabytes, and one operation (``'x' * 10**10``, ``'x'.ljust(10**10)``) can allocate
them at once. So the template renders here, in a child process that imports only the standard
library and jinja2 (never JAX, nothing of jaxfeed's): its address space is capped
(:data:`MEMORY_BYTES`, ``RLIMIT_AS``), its CPU time too, its output is streamed
(``Template.generate``) and cut past :data:`MAX_CHARS` characters per prompt; the parent kills
it at its deadline or on Ctrl-C.

Reads one JSON object on stdin (``template``, ``specials``, ``prompts``, ``max_chars``,
``seconds``) and writes one on stdout: ``{"texts": [...]}`` or ``{"error": KIND, "message":
..., "prompt": I}`` with KIND ``render`` (the template failed), ``size`` or ``memory``.

>>> render("{{ bos_token }}[{{ messages[0]['content'] }}]", {"bos_token": "<s>"}, ["hi"], 100)
{'texts': ['<s>[hi]']}
>>> render("{% for i in range(99) %}xx{% endfor %}", {}, ["hi"], 100)["error"]
'size'
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any

MAX_CHARS = 1_000_000  # a rendered prompt's characters (a context of 128k tokens is ~500k)
MEMORY_BYTES = 1 << 30  # the rendering process's address space
# what a template may raise while it renders (raise_exception, a bad filter argument...)
RENDER_ERRORS = (TypeError, ValueError, KeyError, IndexError, AttributeError, ArithmeticError,
                 RecursionError)  # fmt: skip


def environment() -> Any:
    """jinja2's immutable sandbox set up as ``transformers`` sets it up for chat templates."""
    import jinja2  # optional: the hub extra
    import jinja2.ext  # optional: the hub extra
    from jinja2.sandbox import ImmutableSandboxedEnvironment  # optional: the hub extra

    class Generation(jinja2.ext.Extension):  # {% generation %}...{% endgeneration %}: as is
        tags = frozenset({"generation"})

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_keep"), [], [], body).set_lineno(
                lineno
            )

        def _keep(self, caller: Any) -> str:
            return caller()

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
               sort_keys: bool = False) -> str:  # fmt: skip
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)  # fmt: skip

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(str(fmt))
    return env


def render(template: str, specials: dict[str, str], prompts: list[str], max_chars: int) -> dict:
    """Each prompt as one user message rendered by ``template`` (streamed: cut past
    ``max_chars``), or the first error as ``{"error": ..., "message": ..., "prompt": i}``."""
    import jinja2  # optional: the hub extra

    texts = []
    try:
        compiled = environment().from_string(template)
    except (jinja2.TemplateError, *RENDER_ERRORS) as err:
        return {"error": "render", "message": f"{type(err).__name__}: {err}", "prompt": 0}
    for i, prompt in enumerate(prompts):
        pieces, size = [], 0
        try:
            for piece in compiled.generate(
                messages=[{"role": "user", "content": prompt}], tools=None, documents=None,
                add_generation_prompt=True, **specials,
            ):  # fmt: skip
                size += len(piece)
                if size > max_chars:
                    return {"error": "size", "message": "", "prompt": i}
                pieces.append(piece)
        except MemoryError:
            return {"error": "memory", "message": "", "prompt": i}
        except (jinja2.TemplateError, *RENDER_ERRORS) as err:
            return {"error": "render", "message": f"{type(err).__name__}: {err}", "prompt": i}
        texts.append("".join(pieces))
    return {"texts": texts}


def _limit(seconds: float) -> None:
    """Cap this process's address space and CPU time (where the platform has ``resource``)."""
    try:
        import resource  # optional: POSIX only
    except ImportError:
        return
    for kind, value in (
        (resource.RLIMIT_AS, MEMORY_BYTES),
        (resource.RLIMIT_CPU, int(seconds) + 1),
    ):
        soft, hard = resource.getrlimit(kind)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        if soft == resource.RLIM_INFINITY or soft > value:
            resource.setrlimit(kind, (value, hard))


def main() -> None:
    """Read the request on stdin, render, write the answer on stdout."""
    request = json.loads(sys.stdin.buffer.read())
    _limit(float(request["seconds"]))
    try:
        answer = render(request["template"], request["specials"], request["prompts"],
                        int(request["max_chars"]))  # fmt: skip
    except MemoryError:
        answer = {"error": "memory", "message": "", "prompt": 0}
    sys.stdout.write(json.dumps(answer))


if __name__ == "__main__":
    main()
