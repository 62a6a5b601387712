"""Decode a log in a second process while this one computes: window's reading on its own core.

A window over a one-partition log spends about half its time reading
(splitting lines and decoding the fields it needs) and half folding events
into windows; both are CPU-bound Python, and the GIL keeps threads from
overlapping them. So a forked child reads the partition (the end fixed by the
parent before the fork: the same snapshot as reading in-process), decodes each
piece into columns (streamctl.processing.columns) and sends them down a pipe;
the parent folds one piece while the child decodes the next. The consumer may
hand the child its own column step too (`hooks`): window's key JSON texts,
time checks and number checks then also run on the second core, and a piece
whose columns came out clean travels without its bytes.

The child sends, per piece, ("c", piece, columns, count, pre) or, when the piece
needs the full read, ("r", piece): the parent reads those itself with
inputorder.piece_records, so a corrupt line fails with the same message in
the same place as without read-ahead. A log of several partitions is read and
merged in input order by the child (with the consumer's column step: the merge
keys come from the times it reads), which sends merged batches as columns or,
when a piece in them needs the full read, as records. The child then sends ("end",), or
("e", error class, message) when reading fails. It only reads: if the parent
stops or dies, the child's next write fails and it exits; the parent kills
and reaps it when the consumer stops early. Without a second core (or fork)
the same steps run in the consuming process (ahead): a window reads a log,
or a plain file, one way.
"""

from __future__ import annotations

import marshal
import mmap
import os
import pickle
import signal
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from streamctl import parallel, stopflag
from streamctl.errors import Interrupted, StorageError, StreamctlError
from streamctl.processing import columns, inputorder, mergeorder

PIPE_BYTES = 1 << 20  # a larger pipe: fewer wake-ups per piece
# A plain file's columns go to numpy (time parse, window cells, the session kernel): 1 MiB pieces
# (~6000 lines) spread each call's fixed cost over more events. The reading process takes about the
# same time at 256 KiB and 1 MiB; the folding process less (1M events, whole windows run, A/B: CPU
# 0.89x tumbling, 0.85x sessions of the 256 KiB pieces').
PLAIN_PIECE = 1 << 20
T = TypeVar("T")
_F_SETPIPE_SZ = 1031
# Each message is a tag byte, its length (8 bytes) and the message: marshal (about 3x faster than pickle both ways for
# the lists of bytes, strings and ints most items are, and safe here: both ends are the same
# Python) when it can hold the item, pickle otherwise.
_MARSHAL, _PICKLE = b"m", b"p"
_MARSHAL_VERSION = 4


# In the reading process: how many items it has sent, and a page shared with the consumer, where
# the consumer counts the items it has finished with (asked for the next one after)
_sent = 0
_done: Any = None


def backlog() -> int:
    """In the reading process: how many of the items it sent the consumer has not finished yet (a
    consumer slower than the reader keeps the pipe full: several); 0 in any other process."""
    if _done is None:
        return 0
    return _sent - int.from_bytes(_done[:8], "little")


def can_fork() -> bool:
    return parallel.cores() >= 2 and hasattr(os, "fork")


def items(make: Callable[[], Iterable[T]], what: str) -> Generator[T, None, None]:
    """The items of make(), made in a forked child and handed over a pipe: the caller works on
    one while the child makes the next. make() runs in the child only (on a copy of this
    process); its StreamctlErrors arrive here after the items before them. `what` names the
    input in the error when the child stops without a word."""
    r, w = os.pipe()
    try:
        import fcntl

        fcntl.fcntl(w, _F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, OSError):
        pass  # a smaller pipe only costs more wake-ups
    done = mmap.mmap(-1, 8)  # shared with the child: the items finished here (backlog())
    pid = os.fork()
    if pid == 0:
        os.close(r)
        _child(w, make, done)
    os.close(w)
    finished = 0
    try:
        with os.fdopen(r, "rb", buffering=PIPE_BYTES) as f:
            while True:
                try:
                    msg = _receive(f)
                except EOFError:
                    if stopflag.is_set():
                        raise Interrupted("interrupted") from None
                    raise StorageError(f"{what}: the reading process stopped early") from None
                kind = msg[0]
                if kind == "i":
                    yield msg[1]
                    finished += 1
                    done[:8] = finished.to_bytes(8, "little")
                elif kind == "end":
                    return
                else:
                    raise parallel.rebuilt_error(msg[1], msg[2])
    finally:
        done.close()
        try:
            os.kill(pid, signal.SIGKILL)  # done or stopped early: it has nothing left to do
        except OSError:
            pass
        try:
            os.waitpid(pid, 0)
        except OSError:
            pass


def ahead(make: Callable[[], Iterable[T]], what: str, fork: bool) -> Generator[T, None, None]:
    """make()'s items, made in a forked child (items) when `fork`, else here as they are asked for:
    the one way a reader of window's and join's inputs runs on another core where that pays.
    Either way a generator, whose close() stops the reading (and reaps the child) where it is."""
    return items(make, what) if fork else _here(make)


def _here(make: Callable[[], Iterable[T]]) -> Generator[T, None, None]:
    yield from make()


def _child(w: int, make: Callable[[], Iterable[Any]], done: Any) -> None:
    global _sent, _done
    code = 0
    _sent, _done = 0, done
    try:
        # Ctrl-C reaches the whole process group: the parent decides (it kills the child when it
        # stops; if it dies, the child's next write fails). Were the child to die first, the parent
        # could meet the end of the pipe before its own KeyboardInterrupt and report a failure.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with os.fdopen(w, "wb", buffering=PIPE_BYTES) as f:
            try:
                for item in make():
                    _send(f, ("i", item))
                    # into the pipe now, not when the write buffer fills: the consumer starts on it
                    # at once, and backlog() counts only items the consumer could have taken
                    f.flush()
                    _sent += 1
                _send(f, ("end",))
            except StreamctlError as e:
                _send(f, ("e", type(e).__name__, str(e)))
            except Exception as e:  # noqa: BLE001 - reported by the parent as one clear error
                _send(f, ("e", "StorageError", f"{type(e).__name__}: {e}"))
    except BaseException:  # noqa: BLE001 - a broken pipe (the parent is gone): nothing to report
        code = 1
    finally:
        os._exit(code)


def _send(f: Any, msg: tuple) -> None:
    try:
        data = marshal.dumps(msg, _MARSHAL_VERSION)
        tag = _MARSHAL
    except ValueError:  # an object marshal does not know
        data = pickle.dumps(msg, pickle.HIGHEST_PROTOCOL)
        tag = _PICKLE
    f.write(tag + len(data).to_bytes(8, "little"))
    f.write(data)


def _receive(f: Any) -> tuple:
    """The next message; EOFError at the end of the pipe, even in the middle of one."""
    # whole messages read, then decoded: marshal.load on a file would call its read per object
    head = f.read(9)
    if len(head) < 9:
        raise EOFError
    n = int.from_bytes(head[1:], "little")
    data = f.read(n)
    if len(data) < n:
        raise EOFError
    return marshal.loads(data) if head[:1] == _MARSHAL else pickle.loads(data)


def log_batches(path: str, fields: Sequence[columns.FieldPath], hooks: dict | None = None,
                time_of: inputorder.TimeOf | None = None) -> Generator[inputorder.Block, None, None]:
    """A log's records in the input order (inputorder.log_batches'), read as the columns of `fields`
    (a window's read of a log): a piece at a time as a columns.FieldBatch where it reads so (a
    columns.FieldReader), else as its records. Read in a child process when that can help (two
    or more cores, fork available), else here by the same steps (ahead).

    `hooks`, read when the first batch is asked for: "transform" is applied to each FieldBatch
    where the piece is read, its result travelling as the batch's `pre` instead of the columns.
    It must not change the consumer's state (it may run on a copy); when its result has no keys
    (bad times: the window driver's EventColumns), the batch travels with its columns and bytes,
    for the consumer to read the good records again. "records": False when the consumer never
    asks a batch with a `pre` for its records, whose bytes then stay behind (pickling them cost
    as much as the decoding). Several partitions are read and merged as columns too when there
    is a "transform" (_merged_log_batches), else merged as records by the event time `time_of`
    reads."""
    lg, ranges = inputorder.read_plan(path)
    hooks = hooks if hooks is not None else {}
    if len(ranges) > 1 and hooks.get("transform") is not None:
        yield from _merged_log_batches(path, lg, ranges, fields, hooks)
        return
    if len(ranges) != 1:
        yield from inputorder.log_batches(path, time_of=time_of)
        return
    p, start, end = ranges[0]

    def pieces() -> Iterator[tuple]:  # in the reading process
        read = columns.FieldReader(fields).read_piece
        for piece in inputorder.partition_pieces(lg, p, start, end, inputorder.COLUMN_PIECE):
            batch = read(piece)
            yield ("r", piece) if batch is None else _columns_message(batch, hooks)

    FieldBatch, piece_records = columns.FieldBatch, inputorder.piece_records
    for msg in ahead(pieces, path, can_fork()):
        if msg[0] == "c":
            yield FieldBatch(msg[1], msg[2], msg[3], msg[4])
        else:
            yield piece_records(path, p, msg[1])


def _columns_message(batch: columns.FieldBatch, hooks: dict, transform: Any = None) -> tuple:
    """("c", the piece or None, columns or None, count, pre) for a piece read as columns: what the
    consumer's column step (`transform`, else hooks' "transform") made of them as `pre`, or the
    columns when it made nothing (no keys: bad times, for the consumer to read the records)."""
    transform = transform or hooks.get("transform")
    pre = transform(batch) if transform is not None else None
    if pre is None or pre[1] is None:
        return ("c", batch.piece, batch.cols, batch.n, None)
    return ("c", batch.piece if hooks.get("records", True) else None, None, batch.n, pre)


class _LanePiece:
    """A piece of one partition in the reading process: its columns as the consumer's column step
    made them (times, keys, then the aggregation columns: a mergeorder.Lane's payload of
    columns), and (read on demand) its lines and records."""

    __slots__ = ("path", "p", "piece", "recs", "pre", "clean", "_lines")

    def __init__(self, path: str, p: int, piece: bytes, recs: list | None, pre: tuple) -> None:
        self.path, self.p, self.piece, self.recs, self.pre = path, p, piece, recs, pre
        # usable as columns as they are: read as columns, every time usable, every number a number
        # (otherwise the consumer reads the records: bad times are reported, non-numbers counted)
        self.clean = recs is None and pre[1] is not None and not pre[3]
        self._lines: list[bytes] | None = None

    def __getitem__(self, i: int) -> Any:
        """Column i: the times, the keys, then aggregation column i - 2."""
        return self.pre[i] if i < 2 else self.pre[2][i - 2]

    def lines(self) -> list[bytes]:
        if self._lines is None:
            self._lines = self.piece.splitlines()
        return self._lines

    def records(self) -> list:
        if self.recs is None:
            self.recs = inputorder.piece_records(self.path, self.p, self.piece)
        return self.recs


def _merged_log_batches(path: str, lg: Any, ranges: list[tuple[int, int, int | None]],
                        fields: Sequence[columns.FieldPath], hooks: dict) -> Generator[inputorder.Block, None, None]:
    """A log of several partitions read, made into the consumer's columns ("transform") and merged
    in input order by a child process where that can help (ahead), while this one consumes: the
    merge keys are the running
    maxima of the times the column step reads (the same times time_of reads, so the order of
    inputorder.log_batches). A merged batch whose pieces were all clean travels as the consumer's
    columns (a FieldBatch with `pre`; its lines, reordered, only when "records" asks for them);
    any other goes as its records in input order, for the consumer to read in full."""
    transform, keep = hooks["transform"], hooks.get("records", True)

    def lane(p: int, start: int, end: int | None) -> Iterator[tuple[list, _LanePiece]]:
        read = columns.FieldReader(fields).read_piece
        for piece in inputorder.partition_pieces(lg, p, start, end, inputorder.COLUMN_PIECE):
            batch = read(piece)
            recs = None if batch is not None else inputorder.piece_records(path, p, piece)
            pre = transform(batch if recs is None else recs)
            yield pre[0], _LanePiece(path, p, piece, recs, pre)

    def merged() -> Iterator[tuple]:  # in the reading process
        lanes = [mergeorder.Lane(lane(p, start, end), array=True) for p, start, end in ranges]
        gather = mergeorder.gather
        for where, order in mergeorder.merge(lanes):
            listed = None if order is None else order.tolist()  # (the columns are lists)
            if all(lanes[k].payload.clean for k, _s, _e in where):
                width = 2 + len(lanes[where[0][0]].payload.pre[2])
                ts, ks, *cols = mergeorder.round_columns(lanes, where, listed, width)
                lines = gather(lanes, where, listed, lambda lane: lane.payload.lines()) if keep else None
                text = None if lines is None else b"\n".join(lines) + b"\n"
                yield ("c", text, len(ts), (ts, ks, cols, ()))
            else:
                yield ("r", gather(lanes, where, listed, lambda lane: list(lane.payload.records())))

    FieldBatch = columns.FieldBatch
    for msg in ahead(merged, path, can_fork()):
        if msg[0] == "c":
            yield FieldBatch(msg[1], None, msg[2], msg[3])
        else:
            yield msg[1]


def consumer_idle() -> bool:
    """In the reading process: whether the consumer has finished every item sent (it waits for the
    next); False in any other process."""
    return _done is not None and backlog() == 0


def plain_batches(path: str, fields: Sequence[columns.FieldPath], hooks: dict | None = None) -> Generator[Any, None, None]:
    """A plain file's records a piece at a time: a columns.FieldBatch where the piece reads as
    columns (a plain FieldReader), else a list of records read in full. Read ahead in a child
    process when that can help (a file, not stdin; two or more cores), with `hooks` as in
    log_batches.

    The work is shared by the two processes: when the consumer was found waiting as a piece was
    sent (it is the faster of the two), the child hands it the next piece as its bytes, and the
    consumer reads that one itself (read_plain: the same reading, in either process). Record
    and line numbers are counted here, in input order, whichever process read a piece."""
    hooks = hooks if hooks is not None else {}
    readers: list[columns.FieldReader] = []

    def read_plain(piece: bytes, handed: bool = False) -> tuple:
        """_columns_message for a piece read as columns; ("v", its values, why a line is invalid or
        None, its lines, each value's line) for one read in full (inputorder.plain_piece). A piece the reading process
        `handed` over goes through "consumer transform" when there is one (a step that must run in
        the reading process only, such as numbering keys, is left out)."""
        if not readers:
            readers.append(columns.FieldReader(fields, plain=True))
        batch = readers[0].read_piece(piece)
        if batch is None:
            values, _payloads, error, lines, at = inputorder.plain_piece(piece)
            return ("v", values, error, lines, at)
        return _columns_message(batch, hooks, hooks.get("consumer transform") if handed else None)

    def pieces() -> Iterator[tuple]:
        give = False
        for piece in inputorder.line_blocks(path, PLAIN_PIECE):
            if give:
                give = False
                yield ("p", piece)
                continue
            msg = read_plain(piece)
            give = consumer_idle()
            yield msg
            if msg[0] == "v" and msg[2] is not None:
                return  # an invalid line: the consumer stops there

    def piece(msg: tuple) -> tuple[tuple, int, str | None, int, list[int] | None]:
        """inputorder.numbered's piece of a message (a piece read as columns has no blank line)."""
        if msg[0] == "p":
            msg = read_plain(msg[1], True)
        return (msg, msg[3], None, msg[3], None) if msg[0] == "c" else (msg, len(msg[1]), msg[2], msg[3], msg[4])

    def batches(msgs: Iterable[tuple]) -> Iterator[Any]:
        for msg, base in inputorder.numbered(path, map(piece, msgs)):
            if msg[0] == "c":
                assert isinstance(base, int)  # (a piece read as columns has no blank line)
                yield columns.FieldBatch(msg[1], msg[2], msg[3], msg[4], base=base)
            else:
                yield inputorder.plain_records_of(msg[1], base)

    yield from batches(ahead(pieces, path, path != "-" and can_fork()))
