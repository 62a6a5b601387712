"""streamctl.ingest.files.Followed on real files: what a read hands out when the file changes under it."""

from __future__ import annotations

import os

from streamctl.ingest.files import Followed
from streamctl.ingest.positions import FileEntry


def test_a_read_after_copytruncate_and_regrowth_hands_out_nothing_of_the_new_content(tmp_path):
    """The file is truncated in place and written past the old content's end between two looks: the
    bytes from the old position on are the new content's, never the old content's next lines."""
    path = tmp_path / "app.log"
    path.write_bytes(b"old-1\nold-2\n")
    fd = os.open(path, os.O_RDONLY)
    try:
        f = Followed(FileEntry("f1", str(path), str(path), 0, 0, 0, 0, ""), fd)
        rd = f.read(1 << 20, 1 << 20)
        assert rd is not None and rd.batch.lines == [b"old-1", b"old-2"]
        with open(path, "r+b") as w:
            w.truncate(0)
        with open(path, "ab") as w:
            w.write(b"new-1\nnew-2\nnew-3\n")
        assert f.read(1 << 20, 1 << 20) is None
        assert f.truncated()  # the caller reads the new content from its start
    finally:
        os.close(fd)
