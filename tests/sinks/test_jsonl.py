"""JSON lines are whole lines, whatever the disk does: a write a full disk cuts short is
cut back to the last whole line, and the lines that could not be written are counted."""
import errno
import json
from collections import Counter

import pytest

from pipeline.sinks.jsonl import JsonlWriter


@pytest.mark.parametrize("flush_s", [0.0, 60.0], ids=["each-line", "batched"])
def test_a_full_disk_leaves_whole_lines_and_counts_the_lines_it_lost(small_disk, flush_s):
    disk = small_disk("64k")
    lost: Counter = Counter()
    writer = JsonlWriter(str(disk / "cam.0.jsonl"), flush_s, on_lost=lambda camera, n: lost.update({camera: n}))
    given = 0
    with pytest.raises(OSError) as e:
        for seq in range(10**5):
            given += 1
            writer.write({"camera": "cam", "seq": seq, "pad": "x" * (100 + seq % 37)})  # lines of many lengths
            if flush_s and seq % 50 == 49:
                writer.rotate(str(disk / f"cam.{seq + 1}.jsonl"))  # its 50 lines in one write
    assert e.value.errno == errno.ENOSPC
    seqs = []
    for path in sorted(disk.iterdir(), key=lambda p: int(p.name.split(".")[1])):
        data = path.read_bytes()
        assert not data or data.endswith(b"\n"), path
        seqs += [json.loads(line)["seq"] for line in data.splitlines()]
    assert seqs == list(range(len(seqs))) and len(seqs) + lost["cam"] == given
