"""A large NCCL debug log, as `NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL` writes it for one node.

Eight ranks of one node, each with its version line, a communicator's Init START, two ring
connections and Init COMPLETE, then COLL lines of all ranks interleaved as their threads print
them: the shape of a real job's log, at whatever size, for the benchmark's NCCL row.
"""

from __future__ import annotations

import random
from pathlib import Path

RANKS = 8
HOST = "node07"
OPS = (("AllReduce", 7, 0), ("AllGather", 9, 0), ("ReduceScatter", 9, 0), ("Broadcast", 7, 0))


def generate(path: Path, lines: int, seed: int = 7) -> int:
    """Write about `lines` lines of one node's log to `path`; return the COLL lines written."""
    rng = random.Random(seed)
    comm_id = "0x5a17c0ffee123456"
    head = []
    for rank in range(RANKS):
        prefix = f"{HOST}:{42100 + rank}:{42100 + rank} [{rank}] NCCL INFO"
        pointer = f"0x55d0{rank:02x}a0b1c0"
        head += [
            f"{prefix} NCCL version 2.21.5+cuda12.4",
            f"{prefix} ncclCommInitRank comm {pointer} rank {rank} nranks {RANKS} cudaDev {rank} nvmlDev {rank} "
            f"busId {rank + 1}8000 commId {comm_id} - Init START",
            f"{prefix} Channel 00/0 : {rank}[{rank}] -> {(rank + 1) % RANKS}[{(rank + 1) % RANKS}] via P2P/CUMEM/read",
            f"{prefix} Channel 01/0 : {rank}[{rank}] -> {(rank + 1) % RANKS}[{(rank + 1) % RANKS}] via P2P/CUMEM/read",
            f"{prefix} ncclCommInitRank comm {pointer} rank {rank} nranks {RANKS} cudaDev {rank} nvmlDev {rank} "
            f"busId {rank + 1}8000 commId {comm_id} - Init COMPLETE",
        ]
    calls = 0
    with open(path, "w") as out:
        out.write("\n".join(head) + "\n")
        block = []
        for op_count in range(max(0, lines - len(head)) // RANKS):
            op, datatype, reduce_op = OPS[op_count % len(OPS)]
            count = rng.choice((262144, 1048576, 2097152, 4194304))
            ranks = list(range(RANKS))
            rng.shuffle(ranks)  # the ranks' threads print in no fixed order
            for rank in ranks:
                block.append(
                    f"{HOST}:{42100 + rank}:{42100 + rank} [{rank}] NCCL INFO {op}: opCount {op_count:x} "
                    f"sendbuff 0x7f3a{rank:02x}000000 recvbuff 0x7f3b{rank:02x}000000 count {count} datatype {datatype} "
                    f"op {reduce_op} root 0 comm 0x55d0{rank:02x}a0b1c0 [nranks={RANKS}] stream 0x55d1{rank:02x}c0d0e0"
                )
                calls += 1
            if len(block) >= 8192:
                out.write("\n".join(block) + "\n")
                block = []
        if block:
            out.write("\n".join(block) + "\n")
    return calls
