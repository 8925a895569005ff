"""The bugs the default test suite must catch: issue 18's list, its "Also" list, and new code.

Each mutation finds ``find`` (exactly once) in ``file`` and replaces it with ``replace``; ``tests``
are the pytest ids expected to fail on it. Snippets are code, not line numbers, so moving code
around keeps them valid and changing it makes ``run.py`` stop with a clear message.
"""

from __future__ import annotations

from dataclasses import dataclass

DATA = "tests/contracts/test_promises_data.py"
TRAIN = "tests/contracts/test_promises_train.py"
RUN = "tests/contracts/test_promises_run.py"
GUARD = "tests/contracts/test_promises_guard.py"
RACE = "tests/recipes/test_interrupt_race.py"
IGNORED_SIGINT = "tests/train/test_inherited_sigint.py::test_a_process_started_with_sigint_ignored_keeps_ignoring_it"
LORA = "tests/models/hub/test_lora_parity.py"
ALPHA = "tests/recipes/test_image_alpha.py"
SHORT = "tests/models/test_short_attention.py::test_the_kernel_equals_xla_in_values_and_gradients"
KINDS = "tests/recipes/test_kinds.py"
VARIANT_PARITY = (
    "tests/models/hub/test_causal_lm.py::"
    "test_logits_equal_transformers_with_theta_scaling_and_epsilon_from_the_config"
)


@dataclass(frozen=True)
class Mutation:
    id: str
    file: str
    find: str
    replace: str
    tests: list[str]
    bug: str


MUTATIONS = [
    # ------------------------------------------------------------------ issue 18: the 11 + 2 bugs
    Mutation(
        "order-block-cache-stale",
        "src/jaxfeed/loading/order.py",
        "if block != self._block_start:",
        "if self._block is None:",
        [f"{DATA}::test_promise_shuffled_epoch_reads_every_row_exactly_once_past_one_order_block"],
        "the epoch permutation's block cache is never refreshed (70,000 rows: repeats)",
    ),
    Mutation(
        "loader-state-checks-size-only",
        "src/jaxfeed/loading/loader.py",
        'for key in ("num_rows", "dataset", "batch_size", "shuffle", "drop_last", "seed"):',
        'for key in ("num_rows", "batch_size"):',
        [DATA + "::test_promise_loader_state_is_refused_by_a_loader_that_would_read_other_batches"],
        "load_state_dict validates only num_rows and batch_size",
    ),
    Mutation(
        "loader-fingerprint-ignores-content",
        "src/jaxfeed/loading/sources.py",
        "digest.update(sink.getvalue().to_pybytes())",
        "pass",
        [DATA + "::test_promise_loader_state_is_refused_by_a_loader_that_would_read_other_batches"],
        "a saved loader state is accepted by another dataset with the same features and rows",
    ),
    Mutation(
        "loader-transform-rng-no-epoch",
        "src/jaxfeed/loading/workers/build.py",
        "seeded_rng(recipe.seed, job.epoch, job.step)",
        "seeded_rng(recipe.seed, job.step)",
        [f"{DATA}::test_promise_transform_rng_is_seeded_by_seed_epoch_and_step"],
        "the transform's generator ignores the epoch: every epoch gets the same augmentation",
    ),
    Mutation(
        "loader-int64-unchecked",
        "src/jaxfeed/loading/sources.py",
        '("bool", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float32")',
        '("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "float32")',
        [f"{DATA}::test_promise_int64_values_past_int32_raise_through_the_loader"],
        "int64 columns skip the int32 overflow check in the DataLoader (silent wrap-around)",
    ),
    Mutation(
        "cores-metric-loss-unmasked",
        "src/jaxfeed/train/cores.py",
        "loss = jnp.sum(jnp.where(counts, rows.values * weight, 0.0))",
        "loss = jnp.sum(rows.values)",
        [f"{TRAIN}::test_promise_evaluate_counts_each_real_row_once"],
        "padding rows counted in the loss sums (evaluate, train_loss)",
    ),
    Mutation(
        "cores-metric-values-unmasked",
        "src/jaxfeed/train/cores.py",
        'sums[f"m_{name}"] + jnp.sum(jnp.where(counts, values * weight, 0.0))',
        'sums[f"m_{name}"] + jnp.sum(values)',
        [f"{TRAIN}::test_promise_evaluate_counts_each_real_row_once"],
        "padding rows counted in the metrics (accuracy)",
    ),
    Mutation(
        "cores-train-loss-unmasked",
        "src/jaxfeed/train/cores.py",
        "return total / jnp.maximum(jnp.sum(rows.weight), 1e-9), rows",
        "return jnp.mean(rows.values), rows",
        [
            f"{TRAIN}::test_promise_a_padded_last_batch_trains_on_its_real_rows_only[nnx]",
            f"{TRAIN}::test_promise_a_padded_last_batch_trains_on_its_real_rows_only[linen]",
        ],
        "padding rows in the training loss (the update of a short batch is wrong)",
    ),
    Mutation(
        "cores-padding-rows-real",
        "src/jaxfeed/train/cores.py",
        "real = jnp.arange(values.shape[0]) < n",
        "real = jnp.arange(values.shape[0]) >= 0",
        [
            f"{TRAIN}::test_promise_a_padded_last_batch_trains_on_its_real_rows_only[nnx]",
            f"{TRAIN}::test_promise_evaluate_counts_each_real_row_once",
        ],
        "the padding mask removed everywhere (loss, gradients, metrics)",
    ),
    Mutation(
        "cores-nnx-dropout-ignores-seed",
        "src/jaxfeed/train/cores.py",
        "            model.train()\n            batch = spec.preprocess(batch)\n"
        "            key = dropout_key(spec.seed, step)",
        "            model.train()\n            batch = spec.preprocess(batch)\n"
        "            key = dropout_key(0, step)",
        [f"{TRAIN}::test_promise_dropout_keys_come_from_the_trainer_seed"],
        "dropout keys ignore the Trainer's seed (seeds 0 and 5 train identically)",
    ),
    Mutation(
        "cores-nnx-predict-dropout-on",
        "src/jaxfeed/train/cores.py",
        "model.eval()\n            return forward(model, spec.preprocess(batch), False)",
        "model.train()\n            return forward(model, spec.preprocess(batch), True, base_key)",
        [f"{TRAIN}::test_promise_predict_runs_the_model_in_eval_mode[nnx]"],
        "NNX: dropout left on in predict",
    ),
    Mutation(
        "cores-linen-predict-dropout-on",
        "src/jaxfeed/train/cores.py",
        'return apply(state["params"], state["collections"], spec.preprocess(batch), False)[0]',
        'return apply(state["params"], state["collections"], spec.preprocess(batch), True, base_key)[0]',
        [f"{TRAIN}::test_promise_predict_runs_the_model_in_eval_mode[linen]"],
        "Linen: dropout left on in predict",
    ),
    Mutation(
        "trainer-nan-global-step",
        "src/jaxfeed/train/reporting.py",
        "step {bad - first_step + 1} of the",
        "step {bad + 1} of the",
        [f"{TRAIN}::test_promise_a_non_finite_loss_names_its_step_in_the_epoch_and_writes_nothing"],
        "NonFiniteLossError reports the global step as the step in the epoch",
    ),
    Mutation(
        "array-shape-check-removed",
        "src/jaxfeed/data/features/_nested.py",
        "if block.ndim != len(shape) + 1 or not shape_ok(block.shape[1:], shape):",
        "if block.ndim != len(shape) + 1:",
        [f"{DATA}::test_promise_array_feature_refuses_wrong_shapes_naming_column_and_row"],
        "no shape check for equal-shape/numpy input (pyarrow's error names no column or row)",
    ),
    Mutation(
        "files-atomic-write-in-place",
        "src/jaxfeed/_base/files.py",
        "tmp = temporary_file(path)",
        "tmp = path",
        [
            f"{DATA}::test_promise_an_interrupted_write_keeps_the_old_file",
            f"{DATA}::test_promise_history_files_survive_a_failed_save",
        ],
        "atomic_write writes in place: an interrupted write loses the old file",
    ),
    Mutation(
        "disk-read-into-memory",
        "src/jaxfeed/data/formats/saved.py",
        "source = pa.memory_map(str(file)) if not keep_in_memory else pa.OSFile(str(file))",
        "source = pa.OSFile(str(file))",
        [f"{DATA}::test_promise_saved_datasets_are_memory_mapped_not_read_into_memory"],
        "saved Arrow files read into memory instead of memory-mapped",
    ),
    Mutation(
        "trainer-checkpoint-without-loader",
        "src/jaxfeed/train/checkpointing.py",
        '"loader": loader.state_dict() if hasattr(loader, "state_dict") else None,',
        '"loader": None,',
        [
            TRAIN
            + "::test_promise_resuming_from_a_checkpoint_continues_bitwise_with_the_loader_position"
        ],
        "checkpoints omit the loader position (resume reads epoch 0's order again)",
    ),
    Mutation(
        "order-seeded-per-process",
        "src/jaxfeed/loading/order.py",
        "Permutation(n, (int(seed), int(epoch)))",
        'Permutation(n, (int(seed) + __import__("jax").process_index(), int(epoch)))',
        [f"{DATA}::test_promise_every_process_computes_the_same_global_order"],
        "each process shuffles with its own order (the global batch mixes two permutations)",
    ),
    # ------------------------------------------------------------------ issue 18: "Also"
    Mutation(
        "cli-failure-exit-0",
        "src/jaxfeed/cli/__init__.py",
        '(--debug shows the traceback)",\n        file=sys.stderr,\n    )\n    return 1',
        '(--debug shows the traceback)",\n        file=sys.stderr,\n    )\n    return 0',
        [f"{RUN}::test_promise_failures_exit_with_1_and_one_line_and_debug_shows_the_traceback"],
        "a failure exits with status 0",
    ),
    Mutation(
        "cli-debug-ignored",
        "src/jaxfeed/cli/__init__.py",
        "            return _interrupted_status(args, entry)\n        if args.debug:\n            raise",
        "            return _interrupted_status(args, entry)\n        if False:\n            raise",
        [f"{RUN}::test_promise_failures_exit_with_1_and_one_line_and_debug_shows_the_traceback"],
        "--debug does not show the traceback",
    ),
    Mutation(
        "cli-ctrl-c-no-resume-hint",
        "src/jaxfeed/recipes/train/fit.py",
        '; resume with: {trainer.resume_hint}",',
        '; resume with --resume",',
        [f"{RUN}::test_promise_ctrl_c_leaves_complete_files_and_a_resume_hint"],
        "Ctrl-C does not say how to resume",
    ),
    Mutation(
        "history-save-not-atomic",
        "src/jaxfeed/train/history.py",
        'atomic_write(out / "metrics.jsonl", self.to_jsonl())',
        '(out / "metrics.jsonl").write_text(self.to_jsonl())',
        [f"{DATA}::test_promise_history_files_survive_a_failed_save"],
        "metrics.jsonl written in place (a crash mid-save leaves it empty)",
    ),
    Mutation(
        "early-stopping-auto-mode-min",
        "src/jaxfeed/train/monitor.py",
        'return "min" if "loss" in name or name.endswith(_MINIMISED_SUFFIXES) else "max"',
        'return "min"',
        [f"{TRAIN}::test_promise_early_stopping_mode_and_min_delta"],
        'EarlyStopping mode="auto" minimises accuracies too',
    ),
    Mutation(
        "early-stopping-max-mode-inverted",
        "src/jaxfeed/train/callbacks.py",
        "value > self.best + self.min_delta)",
        "value < self.best - self.min_delta)",
        [f"{TRAIN}::test_promise_early_stopping_mode_and_min_delta"],
        'EarlyStopping mode="max" treats a drop as an improvement',
    ),
    Mutation(
        "early-stopping-no-patience",
        "src/jaxfeed/train/callbacks.py",
        "if self.wait > self.patience:",
        "if self.wait > 0:",
        [f"{TRAIN}::test_promise_early_stopping_waits_patience_epochs_without_improvement"],
        "EarlyStopping ignores patience (stops at the first epoch without improvement)",
    ),
    Mutation(
        "early-stopping-wait-not-reset",
        "src/jaxfeed/train/callbacks.py",
        'self.best, self.best_epoch, self.wait = value, logs.get("epoch"), 0',
        'self.best, self.best_epoch = value, logs.get("epoch")',
        [f"{TRAIN}::test_promise_early_stopping_waits_patience_epochs_without_improvement"],
        "EarlyStopping's patience counts epochs without improvement in total, not in a row",
    ),
    Mutation(
        "early-stopping-min-delta-ignored",
        "src/jaxfeed/train/callbacks.py",
        "value < self.best - self.min_delta)",
        "value < self.best)",
        [f"{TRAIN}::test_promise_early_stopping_mode_and_min_delta"],
        "EarlyStopping ignores min_delta",
    ),
    Mutation(
        "loader-workers-forked",
        "src/jaxfeed/_base/spawn.py",
        'context = multiprocessing.get_context("spawn")  # never fork a process that runs JAX',
        'context = multiprocessing.get_context("fork")',
        [f"{DATA}::test_promise_process_workers_are_spawned_not_forked"],
        "decode workers forked from the process running JAX",
    ),
    Mutation(
        "disk-first-shard-only",
        "src/jaxfeed/data/formats/saved.py",
        '    for entry in entries:\n        if not isinstance(entry, dict) or "filename" not in entry:',
        '    for entry in entries[:1]:\n        if not isinstance(entry, dict) or "filename" not in entry:',
        [f"{DATA}::test_promise_reads_folders_written_by_datasets"],
        "only the first shard of a folder written by datasets is read",
    ),
    Mutation(
        "devices-batch-replicated-not-split",
        "src/jaxfeed/runtime/devices.py",
        "split = placement if batched else flat",
        "split = flat",
        [f"{DATA}::test_promise_sharded_batches_hold_the_right_rows_on_each_device"],
        "sharded batches replicated on every device instead of split",
    ),
    Mutation(
        "devices-leaves-swapped",
        "src/jaxfeed/runtime/devices.py",
        "return _fill(out, iter(placed))",
        "return _fill(out, reversed(list(placed)))",
        [f"{DATA}::test_promise_sharded_batches_hold_the_right_rows_on_each_device"],
        "columns of equal shape swapped when a batch is placed (shapes right, values wrong)",
    ),
    Mutation(
        "checkpoint-pickles-on-save",
        "src/jaxfeed/train/checkpoint.py",
        "json.dumps(payload)  # fail now, not in a background thread",
        '__import__("pickle").dumps(payload)  # fail now, not in a background thread',
        [f"{RUN}::test_promise_checkpoints_never_pickle_when_saving_or_restoring"],
        "saving a checkpoint calls pickle",
    ),
    Mutation(
        "checkpoint-writes-protocol-0-pickle",
        "src/jaxfeed/train/checkpoint.py",
        "json.dumps(payload)  # fail now, not in a background thread",
        'Path(self.directory, "meta.pkl").write_bytes(__import__("pickle")._dumps(payload, 0))',
        [f"{RUN}::test_promise_checkpoints_never_pickle_when_saving_or_restoring"],
        "a protocol-0 pickle file in the checkpoint (pure-Python pickler, not the patched one)",
    ),
    # ------------------------------------------------------------------ new code on main (issues 11, 15, 16)
    Mutation(
        "workers-row-rng-no-epoch",
        "src/jaxfeed/loading/workers/build.py",
        "seeded_rng(recipe.seed, job.epoch, job.positions[i])",
        "seeded_rng(recipe.seed, job.positions[i])",
        [f"{DATA}::test_promise_row_transform_rng_is_seeded_by_seed_epoch_and_position"],
        "issue 15: row_transform's generator ignores the epoch (same augmentation every epoch)",
    ),
    Mutation(
        "workers-row-rng-by-row-in-batch",
        "src/jaxfeed/loading/workers/build.py",
        "seeded_rng(recipe.seed, job.epoch, job.positions[i])",
        "seeded_rng(recipe.seed, job.epoch, i)",
        [f"{DATA}::test_promise_row_transform_rng_is_seeded_by_seed_epoch_and_position"],
        "issue 15: row_transform seeded by the row's place in its batch (depends on batch size)",
    ),
    Mutation(
        "losses-unlabelled-rows-counted",
        "src/jaxfeed/train/losses.py",
        "return batch[targets] >= 0",
        "return batch[targets] >= -1",
        [f"{TRAIN}::test_promise_rows_without_a_label_count_nowhere"],
        "issue 11: rows with label -1 counted in the loss and metrics",
    ),
    Mutation(
        "ops-shard-contiguous-start",
        "src/jaxfeed/data/ops/rows.py",
        "start = div * index + min(index, mod)",
        "start = div * index",
        ["tests/contracts/test_datasets_api.py::test_unique_sort_shard"],
        "issue 16: contiguous shards of an uneven split overlap (differs from datasets)",
    ),
    # ------------------------------------------------------------------ new code on main (issues 12, 14)
    Mutation(
        "callbacks-best-weights-not-restored",
        "src/jaxfeed/train/callbacks.py",
        "trainer.load_snapshot(self._best_state)",
        "pass",
        ["tests/train/test_long_runs.py::test_early_stopping_restores_the_best_weights"],
        "issue 12: EarlyStopping(restore_best_weights=True) keeps the last weights",
    ),
    Mutation(
        "trainer-preempted-without-saving",
        "src/jaxfeed/train/fitting.py",
        "if manager.latest_step != self.step:\n                self.save_checkpoint(manager, loader)",
        "if False:\n                self.save_checkpoint(manager, loader)",
        ["tests/train/test_long_runs.py::test_sigterm_saves_and_resume_is_bitwise_identical"],
        "issue 12: a SIGTERM/SIGINT mid-epoch stops without saving a checkpoint",
    ),
    Mutation(
        "checkpoint-interval-skips-the-best-epoch",
        "src/jaxfeed/train/checkpoint.py",
        "        return self._improves(metrics)\n",
        "        return False\n",
        [
            "tests/train/test_checkpoint_interval.py::"
            "test_an_hour_between_saves_keeps_the_best_epochs_and_the_last"
        ],
        "issue 51 round: min_save_interval skips an epoch that is the best so far",
    ),
    Mutation(
        "cache-key-ignores-source-changes",
        "src/jaxfeed/data/formats/files.py",
        'return {"path": os.path.realpath(path), "size": st.st_size, "version": version}',
        'return {"path": os.path.realpath(path)}',
        [
            "tests/data/formats/test_cache.py::test_cache_is_reused_and_invalidated_when_the_source_changes"
        ],
        "issue 14: the Arrow cache is reused after its source file changed (stale data)",
    ),
    # ------------------------------------------------------------------ issue 26: bugs an audit found missed
    Mutation(
        "stream-prefetch-rng-step",
        "src/jaxfeed/loading/stream_loader.py",
        "step = self.step + len(self.ready)",
        "step = self.step",
        [f"{GUARD}::test_stream_transform_draws_do_not_depend_on_prefetch"],
        "issue 26: batches prefetched on a stream get the step of the one handed out (same draws)",
    ),
    Mutation(
        "stream-resume-offset-last-table",
        "src/jaxfeed/data/iterable/sources.py",
        "self.offset += table.num_rows",
        "self.offset = table.num_rows",
        [f"{GUARD}::test_resume_inside_the_second_unit_read_in_several_tables"],
        "issue 26: a stream's position in a unit counts only its last table (resume repeats rows)",
    ),
    Mutation(
        "stream-split-stride-phase",
        "src/jaxfeed/data/iterable/sources.py",
        "first = (rank - start) % world",
        "first = rank",
        [f"{GUARD}::test_split_by_node_over_units_in_several_tables_is_disjoint_and_complete"],
        "issue 26: split_dataset_by_node's row stride restarts at every table (rows go to other ranks)",
    ),
    Mutation(
        "loader-slot-released-while-aliased",
        "src/jaxfeed/loading/epochs.py",
        "_release_when_gone(keep, release)",
        "_release_when_gone([], release)",
        [f"{GUARD}::test_batches_kept_from_a_process_worker_stay_intact"],
        "issue 26: a worker's slot is reused while a CPU jax.Array still aliases it",
    ),
    Mutation(
        "parallel-shards-ignore-indices",
        "src/jaxfeed/data/ops/parallel.py",
        "table = ds._internal.arrow(slice(start, stop))",
        "table = ds.data.slice(start, stop - start)",
        [f"{GUARD}::test_num_proc_after_shuffle_select_and_filter_equals_one_process"],
        "issue 26: num_proc shards read the table, not the rows after shuffle/select/filter",
    ),
    Mutation(
        "export-digest-first-kib",
        "src/jaxfeed/serve/export.py",
        "hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()",
        "hashlib.sha256(np.ascontiguousarray(array).tobytes()[:1024]).hexdigest()",
        [f"{GUARD}::test_a_byte_flipped_inside_a_large_tensor_is_refused"],
        "issue 26: an export's weight checksums cover each tensor's first KiB only",
    ),
    Mutation(
        "files-sibling-prefix-inside",
        "src/jaxfeed/_base/files.py",
        "return path == root or path.startswith(root.rstrip(os.sep) + os.sep)",
        "return path.startswith(root.rstrip(os.sep))",
        [f"{GUARD}::test_a_sibling_folder_sharing_the_prefix_is_outside"],
        "issue 26: /d/ds-evil counts as inside /d/ds (state.json, metadata, symlinks)",
    ),
    Mutation(
        "validate-class-id-equal-num-classes",
        "src/jaxfeed/data/formats/validate.py",
        "if low.as_py() >= -1 and high.as_py() < n:",
        "if low.as_py() >= -1 and high.as_py() <= n:",
        [f"{GUARD}::test_a_stored_class_id_equal_to_num_classes_is_refused"],
        "issue 26: a stored class id equal to num_classes is accepted",
    ),
    Mutation(
        "recipe-metadata-csv-is-data",
        "src/jaxfeed/recipes/folders.py",
        "        if p.name in METADATA:\n            continue\n",
        "",
        [f"{GUARD}::test_the_command_trains_on_an_image_folder_with_metadata_csv"],
        "issue 26: an image folder with metadata.csv is taken for a folder of data files",
    ),
    Mutation(
        "launch-no-kill-after-grace",
        "src/jaxfeed/cli/launch.py",
        "                if proc.poll() is None:\n                    proc.kill()\n        for key",
        "                if False:\n                    proc.kill()\n        for key",
        [
            "tests/e2e/test_cli_launch_signals.py::test_a_failed_process_stops_the_others_even_one_ignoring_sigterm"
        ],
        "issue 26: jaxfeed launch waits forever for a process that ignores SIGTERM after another failed",
    ),
    Mutation(
        "preemption-catches-ignored-sigint",
        "src/jaxfeed/train/preemption.py",
        "if signal.getsignal(sig) is not signal.SIG_IGN:",
        "if True:",
        [IGNORED_SIGINT],
        "issue 26: fit catches a SIGINT the process was started ignoring (`cmd &` in a script)",
    ),
    Mutation(
        "interrupt-catches-ignored-sigint",
        "src/jaxfeed/recipes/interrupt.py",
        "or signal.getsignal(signal.SIGINT) is signal.SIG_IGN",
        "or False",
        [IGNORED_SIGINT],
        "issue 26: the CLI's Ctrl-C handler replaces a SIGINT the process was started ignoring",
    ),
    Mutation(
        "launch-catches-ignored-sigint",
        "src/jaxfeed/cli/launch.py",
        "if signal.getsignal(s) is not signal.SIG_IGN\n    ]",
        "if True\n    ]",
        [IGNORED_SIGINT],
        "issue 26: jaxfeed launch catches a SIGINT it was started ignoring",
    ),
    Mutation(
        "interrupt-redelivery-lost-in-cleanup",
        "src/jaxfeed/recipes/interrupt.py",
        'state["pending"] = False  # landing in a clean-up again schedules another one\n',
        "\n",
        [f"{RACE}::test_a_redelivery_landing_in_a_cleanup_again_is_redelivered_again"],
        "issue 26: a Ctrl-C re-delivered into a GC callback again is dropped (training goes on)",
    ),
    Mutation(
        "interrupt-handler-left-after-race",
        "src/jaxfeed/recipes/interrupt.py",
        "        try:\n            # no re-delivery starts after this; one sent meanwhile may raise right here, while\n"
        "            # the lock is awaited: it is this block's Ctrl-C, and the finally below still runs\n"
        "            with lock:\n"
        '                state["active"] = False\n',
        '        with lock:\n            state["active"] = False\n        try:\n',
        [f"{RACE}::test_a_redelivery_racing_the_block_exit_is_raised_once_by_the_block"],
        "issue 26: a re-delivery raised while the block exits leaves its SIGINT handler installed",
    ),
    # ------------------------------------------------------------------ issue 23: variable-length data
    Mutation(
        "padding-labels-pad-zero",
        "src/jaxfeed/loading/padding.py",
        'if column == "labels":\n            return LABEL_PAD',
        'if column == "labels":\n            return 0',
        ["tests/loading/test_varlen.py::test_padding_to_buckets_labels_and_mask"],
        "issue 23: labels padded with 0 (a real class) instead of -100",
    ),
    Mutation(
        "packing-bins-not-closed-in-plan",
        "src/jaxfeed/loading/packing.py",
        "    for j in range(len(bins)):\n        if bins[j]:\n            close(j)",
        "    pass",
        [
            "tests/loading/test_varlen.py::test_packing_keeps_every_token_once_with_segments_and_positions"
        ],
        "issue 23: the rows left in open bins at the end of an epoch are dropped",
    ),
    Mutation(
        "bucketing-batches-not-shuffled",
        "src/jaxfeed/loading/bucketing.py",
        "        if shuffle and full > 1:",
        "        if False:",
        ["tests/loading/test_varlen.py::test_bucketing_every_row_once_shuffled_and_less_padding"],
        "issue 23: bucketed batches come sorted by length (no shuffle)",
    ),
    Mutation(
        "stream-regroup-buffer-not-resumed",
        "src/jaxfeed/loading/stream_loader.py",
        'for table in itertools.chain(resume["pending"] if resume else [], read):',
        "for table in read:",
        ["tests/loading/test_varlen.py::test_stream_options_and_exact_resume[bucketing]"],
        "issue 23: a resumed stream loses the buffered rows not yet handed out",
    ),
    # ------------------------------------------------------------------ issue 55: an audit's nine
    Mutation(
        "rope-theta-top-level-ignored",
        "src/jaxfeed/models/hub/decoder.py",
        'base = float(params.get("rope_theta", config.get("rope_theta", 10000.0)))',
        'base = float(params.get("rope_theta", 10000.0))',
        [f"{VARIANT_PARITY}[llama-linear]", f"{VARIANT_PARITY}[qwen3-llama3]"],
        "issue 55: a rope_theta at config.json's top level is ignored (10,000 used)",
    ),
    Mutation(
        "rope-linear-scaling-twice",
        "src/jaxfeed/models/hub/decoder.py",
        'inv = inv / np.float32(params["factor"])',
        'inv = inv / np.float32(params["factor"]) ** 2',
        [f"{VARIANT_PARITY}[llama-linear]", f"{VARIANT_PARITY}[qwen2-linear]"],
        "issue 55: linear rotary scaling applied twice",
    ),
    Mutation(
        "rms-norm-eps-constant",
        "src/jaxfeed/models/hub/decoder.py",
        'norm_eps=float(config.get("rms_norm_eps", 1e-6))',
        "norm_eps=1e-6",
        [f"{VARIANT_PARITY}[llama-linear]", f"{VARIANT_PARITY}[mistral-llama3]"],
        "issue 55: the config's rms_norm_eps ignored for a constant",
    ),
    Mutation(
        "stop-strings-first-row-only",
        "src/jaxfeed/train/generation.py",
        "return [any(s in text for s in stops) for text in texts]",
        "return [any(s in texts[0] for s in stops) for text in texts]",
        ["tests/train/test_generation_stop.py::test_each_row_stops_at_its_own_stop_string"],
        "issue 55: stop strings checked on the first row only (the others end with it)",
    ),
    Mutation(
        "budget-ignores-grad-accum",
        "src/jaxfeed/recipes/config/budget.py",
        "steps = max(1, batches // max(config.grad_accum, 1))",
        "steps = max(1, batches)",
        [
            "tests/recipes/test_budget.py::"
            "test_the_step_floor_counts_optimizer_steps_with_gradient_accumulation"
        ],
        "issue 55: the small-data budget counts batches, not optimizer steps, with --grad-accum",
    ),
    Mutation(
        "lr-auto-rate-at-minimum",
        "src/jaxfeed/recipes/train/lr_finder.py",
        '"lr": float(f"{chosen:.2g}"),',
        '"lr": float(f"{at_min:.2g}"),',
        [
            "tests/recipes/test_lr_finder.py::"
            "test_the_run_trains_at_a_tenth_of_the_rate_of_the_curves_minimum"
        ],
        "issue 55: --lr auto records the rate at the smoothed loss's minimum, not a tenth of it",
    ),
    Mutation(
        "padding-tokenizer-side-wins",
        "src/jaxfeed/loading/padding.py",
        "        if self.side is not None:\n            return self.side\n"
        "        if self.tokenizer is not None:\n"
        "            return tokenizer_padding_side(self.tokenizer)\n",
        "        if self.tokenizer is not None:\n"
        "            return tokenizer_padding_side(self.tokenizer)\n"
        "        if self.side is not None:\n            return self.side\n",
        [
            "tests/loading/test_conventions.py::test_padding_follows_the_tokenizer_side_as_transformers"
        ],
        "issue 55: an explicit Padding(side=...) loses to the tokenizer's padding side",
    ),
    Mutation(
        "text-export-tokenizer-truncation",
        "src/jaxfeed/serve/spec.py",
        "if cut and {k: (tokenizer.truncation or {}).get(k) for k in want} != want:",
        "if cut and tokenizer.truncation is None:",
        [
            "tests/cli/test_cli_hub.py::"
            "test_a_text_longer_than_the_run_is_cut_to_its_length_by_predict_and_the_export"
        ],
        "issue 55: a text export keeps tokenizer.json's own truncation, not the run's max_length",
    ),
    Mutation(
        "checkpoint-truncation-side-dropped",
        "src/jaxfeed/recipes/kinds/text.py",
        'add_special_tokens=not joined, truncation_side=prep.text.get("truncation_side"),',
        "add_special_tokens=not joined,",
        [
            "tests/recipes/test_truncation_side.py::"
            "test_the_checkpoints_side_cuts_training_serving_and_the_spec"
        ],
        "issue 51 round: a checkpoint's truncation_side left is ignored by training's tokenization",
    ),
    Mutation(
        "fit-leaves-a-second-state",
        "src/jaxfeed/train/cores.py",
        "nnx.update((self.model, self.optimizer), self.state)",
        "nnx.update((self.model, self.optimizer), jax.tree.map(jnp.copy, self.state))",
        ["tests/train/test_state_memory.py"],
        "issue 51: after fit the model objects hold copies: the devices hold the state twice",
    ),
    Mutation(
        "worker-omp-threads-unset",
        "src/jaxfeed/loading/workers/backends.py",
        '        "OMP_NUM_THREADS",\n        "OPENBLAS_NUM_THREADS",\n',
        '        "OPENBLAS_NUM_THREADS",\n',
        [
            "tests/loading/test_worker_pool.py::"
            "test_workers_run_blas_and_openmp_on_one_thread_unless_the_user_said_otherwise"
        ],
        "issue 55: worker processes start without OMP_NUM_THREADS=1",
    ),
    # ------------------------------------------------------------------ issue 65: seeded bugs
    # that survived both tiers. Snippets of items 1 and 3 are in adapters.py's DEFAULT_TARGETS /
    # load_adapter as of 6b9ffc2 (to move with them into the family records); items 8, 11, 12,
    # 13 are against models/stacked.py, train/cores.py and models/attention.py as of 6b9ffc2.
    Mutation(
        "lora-bert-default-targets-query-key",
        "src/jaxfeed/models/hub/bert.py",
        'QUERY_VALUE = ("query", "value")',
        'QUERY_VALUE = ("query", "key")',
        [f"{LORA}::test_default_targets_are_pefts"],
        "issue 65 #1: LoRA() on BERT adapts query and key instead of PEFT's query and value",
    ),
    Mutation(
        "lora-trainable-freezes-new-head",
        "src/jaxfeed/train/freeze.py",
        'if p.rsplit(".", 1)[-1] in ("lora_a", "lora_b") or p in extra}',
        'if p.rsplit(".", 1)[-1] in ("lora_a", "lora_b")}',
        [
            "tests/train/test_hub_finetune.py::"
            "test_trainable_lora_trains_a_new_head_with_the_adapters"
        ],
        "issue 65 #2: trainable='lora' freezes a newly initialised head (it stays random)",
    ),
    Mutation(
        "lora-old-vit-targets-refused",
        "src/jaxfeed/models/hub/adapters.py",
        "chosen = [n for n, m in modules.items() if matches(n, targets) or matches(m[2], targets)]",
        "chosen = [n for n, m in modules.items() if matches(n, targets)]",
        [f"{LORA}::test_an_adapter_saved_before_the_vit_renames_loads"],
        "issue 65 #3: a PEFT adapter of ViT's pre-transformers-5 names is refused (match no layer)",
    ),
    Mutation(
        "lora-old-vit-tensor-names-unmapped",
        "src/jaxfeed/models/hub/adapters.py",
        "by_name = {_normalised(model_type, n): n for n in weights.names()}",
        "by_name = {n: n for n in weights.names()}",
        [f"{LORA}::test_an_adapter_saved_before_the_vit_renames_loads"],
        "issue 65 #3: an old ViT adapter's tensor names are not renamed (refused: missing)",
    ),
    Mutation(
        "lora-merge-int8-casts-to-int8",
        "src/jaxfeed/models/lora.py",
        "kernel = (base + layer.delta()).astype(dtype)",
        "kernel = (base + layer.delta()).astype(layer.kernel[...].dtype)",
        [
            "tests/models/test_lora.py::test_a_merged_int8_layer_is_float32_dequantized_plus_the_update"
        ],
        "issue 65 #4: merging an int8 LoRA layer casts the merged kernel to int8 without scales",
    ),
    Mutation(
        "lora-int8-merge-skips-full-precision",
        "src/jaxfeed/models/hub/api.py",
        '    if getattr(model, "hub_quantize", None):\n        model = _unquantized(model)\n',
        "",
        [f"{LORA}::test_an_int8_model_merges_into_the_checkpoints_full_precision_weights"],
        "issue 65 #4: save_pretrained(merge=True) of an int8 model merges the int8-rounded weights",
    ),
    Mutation(
        "checkpoint-interval-best-always-minimised",
        "src/jaxfeed/train/checkpoint.py",
        "return pick_best([(0, self._best_saved), (1, value)], self.best_mode) == 1",
        'return pick_best([(0, self._best_saved), (1, value)], "min") == 1',
        ["tests/train/test_checkpoint_interval.py::test_a_maximised_metric_saves_its_best_epochs"],
        "issue 65 #7: min_save_interval with accuracy skips the best epochs, saves worse ones",
    ),
    Mutation(
        "int8-scale-per-tensor",
        "src/jaxfeed/models/lora.py",
        "channelwise_axes=[1]",
        "channelwise_axes=[]",
        ["tests/models/test_lora.py::test_int8_scales_are_one_per_output_channel"],
        "issue 65 also: int8 kernels get one scale per tensor, not per output channel",
    ),
    Mutation(
        "lora-dropout-at-inference",
        "src/jaxfeed/models/lora.py",
        "h = x if self.dropout is None else self.dropout(x)",
        "h = x if self.dropout is None else self.dropout(x, deterministic=False)",
        [
            "tests/models/test_lora.py::test_adapter_dropout_acts_in_training_only",
            f"{LORA}::test_adapter_dropout_is_off_at_inference",
        ],
        "issue 65 also: LoRA dropout drops adapter inputs at inference (generate crashes)",
    ),
    Mutation(
        "lora-dropout-made-after-eval",
        "src/jaxfeed/models/hub/api.py",
        "    _adapt(model, lora, adapter, quantize, seed, list(report.newly_initialised), fill)\n"
        "    model.eval()",
        "    model.eval()\n"
        "    _adapt(model, lora, adapter, quantize, seed, list(report.newly_initialised), fill)",
        [f"{LORA}::test_adapter_dropout_is_off_at_inference"],
        "issue 65 also: from_pretrained's adapters are made after eval(): their dropout is on",
    ),
    Mutation(
        "shards-interleave-partitions",
        "src/jaxfeed/data/formats/shards.py",
        'rows = sorted(stats, key=lambda r: (r["part"], r["shard"]))',
        'rows = sorted(stats, key=lambda r: (r["shard"], r["part"]))',
        [
            "tests/data/formats/test_shards.py::"
            "test_pieces_over_max_shard_size_keep_the_sources_order"
        ],
        "issue 65 #5: from_spark/from_ray of pieces over max_shard_size interleave their rows",
    ),
    Mutation(
        "to-ray-blocks-accumulate",
        "src/jaxfeed/data/formats/ray.py",
        "            pending, size = [], 0\n",
        "            size = 0\n",
        ["tests/data/formats/test_shards.py::test_to_ray_puts_each_row_into_one_block"],
        "issue 65 #6: to_ray() over 64 MiB repeats rows (each block holds the ones before it)",
    ),
    Mutation(
        "dropout-key-seed-plus-step",
        "src/jaxfeed/train/cores.py",
        "return jax.random.fold_in(jax.random.key(seed, impl=dropout_impl()), step)",
        "return jax.random.key(seed + step, impl=dropout_impl())",
        [
            "tests/train/test_dropout_keys.py::"
            "test_no_seed_replays_another_seeds_keys_at_another_step"
        ],
        "issue 65 #8: dropout keys are key(seed + step): seed 1 replays seed 0 a step later",
    ),
    Mutation(
        "sharding-mesh-axis-name-without-rule-whole",
        "src/jaxfeed/runtime/sharding.py",
        "                elif logical_name in mesh.axis_names:\n"
        "                    entries[dim] = (logical_name,)\n",
        "",
        [
            "tests/runtime/test_sharding_plan.py::"
            "test_a_logical_name_that_is_a_mesh_axis_splits_over_it_without_a_rule"
        ],
        "issue 65 #10: a logical axis named like a mesh axis, with no rule, is not split",
    ),
    Mutation(
        "scan-auto-inverted",
        "src/jaxfeed/models/stacked.py",
        '    if scan == "auto":\n        return 1\n',
        '    if scan == "auto":\n        return 0 if jax.default_backend() != "cpu" else 1\n',
        ["tests/models/hub/test_scanned_layers.py::test_auto_scans_on_every_backend"],
        "issue 65 #11: scan='auto' loops on accelerators (minutes-long TPU compiles)",
    ),
    Mutation(
        "remat-ignored-in-layer-loop",
        "src/jaxfeed/models/stacked.py",
        "        if recompute:\n"
        "            x = nnx.remat(lambda mod, h, r: call(mod, h, r), policy=policy)(\n"
        "                layer, x, _rngs(keys, i)\n"
        "            )\n"
        "        else:\n"
        "            x = call(layer, x, _rngs(keys, i))\n",
        "        x = call(layer, x, _rngs(keys, i))\n",
        ["tests/models/hub/test_scanned_layers.py::test_remat_recomputes_each_layer_run_as_a_loop"],
        "issue 65 #12: remat does nothing where layers run as a loop (scan=False, graphs differ)",
    ),
    Mutation(
        "flash-gqa-heads-tiled",
        "src/jaxfeed/models/attention.py",
        "k, v = jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2)",
        "k, v = jnp.tile(k, (1, 1, group, 1)), jnp.tile(v, (1, 1, group, 1))",
        [
            "tests/models/test_attention.py::"
            "test_flash_pairs_each_query_head_with_its_groups_kv_head_interpreted"
        ],
        "issue 65 #13: TPU flash pairs query heads with the wrong KV heads (2+ KV heads)",
    ),
    Mutation(
        "image-transparent-colour-not-alpha",
        "src/jaxfeed/serve/spec.py",
        'return image.mode in ALPHA_MODES or "transparency" in image.info',
        "return image.mode in ALPHA_MODES",
        [f"{ALPHA}::test_transparent_colours_and_grey_alpha_are_composited"],
        "issue 65 #14: a palette/RGB PNG's transparent colour is not composited",
    ),
    Mutation(
        "image-grey-alpha-not-composited",
        "src/jaxfeed/serve/spec.py",
        "if self.image_background is not None and have in (2, 4) and channels != 4:",
        "if self.image_background is not None and have == 4 and channels != 4:",
        [f"{ALPHA}::test_transparent_colours_and_grey_alpha_are_composited"],
        "issue 65 #15: grey-with-alpha (LA) images are not composited (alpha dropped)",
    ),
    Mutation(
        "image-la-not-an-alpha-mode",
        "src/jaxfeed/serve/spec.py",
        'ALPHA_MODES = ("RGBA", "LA", "PA", "RGBa", "La")',
        'ALPHA_MODES = ("RGBA", "PA", "RGBa", "La")',
        [f"{ALPHA}::test_transparent_colours_and_grey_alpha_are_composited"],
        "issue 65 #15: LA images are not seen as transparent: their alpha is dropped",
    ),
    Mutation(
        "kind-check-ignores-clip-seconds",
        "src/jaxfeed/recipes/kinds/base.py",
        '        for flag, value in (("--sample-rate", config.sample_rate),\n'
        '                            ("--clip-seconds", config.clip_seconds)):  # fmt: skip\n',
        '        for flag, value in (("--sample-rate", config.sample_rate),):  # fmt: skip\n',
        [
            f"{KINDS}::test_the_audio_flags_are_refused_by_every_other_kind",
            # not [array]: with the bug its run of digits trains for a minute before failing
            *(
                f"{KINDS}::test_a_run_of_any_other_kind_refuses_clip_seconds[{kind}]"
                for kind in ("image", "table", "text", "lm")
            ),
        ],
        "issue 65 #9: --clip-seconds on an image, table or text run is silently ignored",
    ),
    Mutation(
        "corpus-split-rows-random",
        "src/jaxfeed/recipes/data.py",
        "rows = _part_rows(train, fraction, seed, stratify, n_val if in_order else None)",
        "rows = _part_rows(train, fraction, seed, stratify)",
        ["tests/recipes/test_split_order.py::test_a_corpus_splits_rows_name_the_lines_they_hold"],
        "issue 65 #16: a corpus's split records a random split's rows: errors name wrong lines",
    ),
    Mutation(
        "short-attention-masked-keys-get-gradients",
        "src/jaxfeed/models/kernels/short_attention.py",
        "                    ds = jnp.where(keep, ds, 0.0)\n",
        "                    ds = ds\n",
        [SHORT + "[no-real-key]"],
        "the short kernel's backward pass sends gradient to masked keys (a row with none real)",
    ),
    Mutation(
        "short-attention-heads-of-a-group-mixed",
        "src/jaxfeed/models/kernels/short_attention.py",
        "                p, total = _weights(q if sel is None else jnp.where(sel, q, 0), k, keep, scale)\n"
        "                o = lax.dot(",
        "                p, total = _weights(q, k, keep, scale)\n                o = lax.dot(",
        [SHORT + "[4-heads-of-32]", SHORT + "[vit-length-padded]"],
        "the short kernel's logits sum over every head of a 128-lane group, not one head's",
    ),
]
