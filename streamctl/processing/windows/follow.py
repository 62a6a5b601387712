"""`window --follow`: a window run over a log forever, its state checkpointed with its offsets."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from operator import itemgetter

from streamctl.processing import inputorder
from streamctl.processing.checkpoint import encode as encode_checkpoint
from streamctl.processing.following import FOLLOW_BATCH, lock_group, resume_positions, run_rounds, skip_deleted
from streamctl.processing.windows.config import WindowConfig
from streamctl.processing.windows.driver import WindowRun
from streamctl.processing.windows.events import time_getter

CHECKPOINT_FORMAT = 1
_partition_offset = itemgetter("partition", "offset")


def checkpoint_path(log, group: str) -> str:
    from streamctl.groups import files

    return files.path(log, group, "window.json")


def follow(path: str, group: str | None, cfg: WindowConfig, emit: Callable[[list], None],
           flush_out: Callable[[], None], idle_timeout: float | None,
           late_sink: Callable[[dict], None] | None = None,
           flush_late: Callable[[], None] | None = None,
           notice: Callable[[str], None] | None = None) -> WindowRun:
    """Run a window on a log forever (until a stop signal or idle timeout), emitting as the watermark moves.

    With a group, input offsets and window state are written together, atomically,
    to LOG/groups/.G.window.json after the rows they produced were flushed: a
    kill -9 at any point restarts from a consistent (offsets, state) pair, so no
    event is lost or counted twice; rows emitted after the last checkpoint are
    written again (identically) after a restart.

    An idle timeout with a group ends the run like a stop signal: the windows the
    watermark closed were written, the open ones stay in the checkpoint and are
    written once, by the run that closes them (as join's idle timeout leaves its
    pending events), so the outputs of successive runs, put together, hold each
    window once. Without a group there is no later run to close them: the idle
    timeout writes them as the end of input would.

    The group resumes as `consume --group` does: an offset that retention or
    compaction deleted resumes at the next record, said through `notice`; an
    offset past the end of its partition is refused (StorageError).
    """
    import os

    from streamctl import stopflag
    from streamctl.errors import StorageError, UsageError
    from streamctl.groups import files, offsets
    from streamctl.live.wait import Waiter
    from streamctl.processing import inputorder, mergeorder
    from streamctl.storage import log as logmod

    lg = logmod.open_log(path)
    run = WindowRun(cfg, True, late_sink)
    positions: dict[int, int] = {}
    # each partition's merge key (mergeorder.Lane.high) after its last record read, so a round
    # merges its partitions in the input order where the round before stopped
    highs: dict[int, int] = {}
    time_of = None if cfg.processing_time else time_getter(cfg, True)
    ckpt = None
    lock_fd = None
    if group is not None:
        ckpt = checkpoint_path(lg, group)
        lock_fd = lock_group(lg, group, "window")
        try:
            from streamctl.processing.checkpoint import load_checkpoint

            data = load_checkpoint(ckpt)  # None when there is none; every field checked (a StorageError names it)
            if data is not None:
                if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT or "run" not in data:
                    raise StorageError(f"{ckpt}: not a window checkpoint (overwritten by hand or by a group reset?); "
                                       "move it away to start over")
                try:
                    run.load(data["run"])
                    positions = {int(p): int(o) for p, o in data["offsets"].items()}
                    highs = {int(p): int(h) for p, h in data.get("merge_keys", {}).items()}
                except UsageError as e:
                    raise UsageError(f"{ckpt}: {e}") from None  # other options: name the file
                except (KeyError, TypeError, ValueError, AttributeError) as e:
                    raise StorageError(f"{ckpt}: damaged window checkpoint ({type(e).__name__}: {e}); "
                                       "move it away to start over") from None
            else:
                positions = dict(offsets.load(lg, group))
            positions = resume_positions(lg, group, positions, ckpt if data is not None else None, notice, "window")
        except BaseException:
            os.close(lock_fd)  # a refused checkpoint or resume position: the group is free again
            raise

    def save() -> None:
        """Write the checkpoint: the run's state and the offsets it has read up to."""
        if ckpt is None:
            return
        if flush_late is not None:
            flush_late()
        body = {"format": CHECKPOINT_FORMAT, "group": group,
                "offsets": {str(p): o for p, o in sorted(positions.items())},
                "merge_keys": {str(p): h for p, h in sorted(highs.items())}, "run": run.dump()}
        files.write(lg, ckpt, encode_checkpoint(body))
        if positions:
            # the group file is for `stat` (lag); the checkpoint above is what a restart trusts
            assert group is not None  # a checkpoint is kept only with --group
            offsets.commit(lg, group, dict(positions))

    def done(batch: inputorder.Block) -> None:
        assert isinstance(batch, mergeorder.MergedBatch)  # log_batches merges when given highs
        # the last record of each partition in the batch (later pairs overwrite earlier ones)
        for p, off in dict(map(_partition_offset, batch)).items():
            positions[p] = off + 1
        for (_i, p), h in batch.highs.items():  # its lanes are named (input, partition)
            highs[p] = h

    def round_of(batches: Iterator[inputorder.Block]) -> Iterator[inputorder.Block]:
        """About FOLLOW_BATCH records, a batch at a time, until a stop signal."""
        n = 0
        for batch in batches:
            if stopflag.is_set():
                return
            yield batch
            n += len(batch)
            if n >= FOLLOW_BATCH:
                return

    def one_round() -> int:
        before = run.seq + run.stats.bad_time
        skip_deleted(lg, positions, notice)
        batches = inputorder.log_batches(path, starts=dict(positions), time_of=time_of, highs=highs)
        run.feed_batches(round_of(batches), emit, source=path, done=done)
        batches.close()
        got = run.seq + run.stats.bad_time - before
        run.tick(emit)
        return got

    def checkpoint() -> None:
        flush_out()
        save()

    waiter = Waiter(path)
    try:
        run_rounds(one_round, checkpoint, waiter, idle_timeout)
        if not stopflag.is_set() and ckpt is None:
            # idle timeout without a group: no later run resumes these windows, so they are written
            # as the end of input would write them. With a group they stay open in the checkpoint
            # (saved by run_rounds) and are written once, when a later run's watermark closes them.
            run.finish(emit)
    finally:
        waiter.close()
        if lock_fd is not None:
            os.close(lock_fd)
    return run
