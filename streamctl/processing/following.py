"""What every follower of a log shares (`window --follow`, `join --follow`): where a group resumes,
and what to do when retention deleted the records a follower was about to read."""

from __future__ import annotations

from collections.abc import Callable

from streamctl.storage.log import Log


def resume_positions(lg: Log, group: str, positions: dict[int, int], ckpt: str | None,
                     notice: Callable[[str], None] | None, command: str) -> dict[int, int]:
    """The offsets a group resumes from, through consume's checks (consumer.plan) on them.

    consumer.plan checks the group file; it mirrors the checkpoint's offsets (follow's save
    writes both), so a mirror that a crash between the two writes left behind is brought
    up to the checkpoint first.
    """
    from streamctl.clients import consumer
    from streamctl.errors import StorageError
    from streamctl.groups import offsets

    if ckpt is not None and positions:
        committed = offsets.load(lg, group)
        if any(committed.get(p) != o for p, o in positions.items()):
            offsets.commit(lg, group, dict(positions))
    try:
        pl = consumer.plan(lg, list(range(lg.partitions)), None, group, follow=True)
    except StorageError as e:
        if ckpt is None:
            raise
        raise StorageError(f"{e}; `{command} --follow --group {group}` resumes from the offsets in {ckpt}: "
                           f"move that checkpoint away too (its state is of the records before)") from None
    for note in pl.notices:
        if notice is not None:
            notice(note)
    return {p: pl.positions[p].start if p in pl.positions else o for p, o in positions.items()}


def skip_deleted(lg: Log, positions: dict[int, int], notice: Callable[[str], None] | None) -> None:
    """Partitions whose next offset retention deleted while this follower ran (whole segments below
    it are gone): said, and moved to the first segment that is left, as a restart would."""
    for p, off in positions.items():
        segs = lg.segments(p)
        if segs and off < segs[0].base:
            if notice is not None:
                notice(f"{lg.path}: partition {p}: offset {off} is no longer in the log (retention removed it "
                       f"before it was read); resuming at {segs[0].base}, the next existing record")
            positions[p] = segs[0].base
