"""Collective bandwidth of the whole group, of every pair of nodes, and of each direction.

    torchrun ... allreduce_bench.py --sizes 65536,1048576 --rounds "0-1,2-3;0-2,1-3;0-3,1-2"

Started by the health check (playbooks/check.yml) through the launcher, exactly as train.yml
starts jobs. NCCL on GPUs, gloo on the CPU. Prints nccl-tests-like lines and writes
collectives.json (rank 0) in the current folder:

- all_reduce over the whole group, for each size: time, algbw (size / time) and busbw
  (algbw * 2 (n - 1) / n, nccl-tests' measure of the links' use);
- the same for every pair of nodes (one process each: each node's local rank 0), as both
  ranks sending the message to each other at once (what a two-rank all_reduce moves), the
  pairs run in the given rounds of disjoint pairs, all pairs of a round at once, point to
  point on the world's group;
- each direction of every pair at the largest size (send on one side, receive on the other),
  so that a node that sends or receives slowly stands out even on two nodes;
- the pairs and directions in two passes (--passes), each figure the best of them: a slow
  link is slow in both, a moment of other traffic in one only;
- with more than one rank per node, all_reduce over all the ranks (GPUs) of each node at
  once, at the largest size: NVLink or PCIe inside the node;
- on GPUs, each GPU's host-to-GPU copy bandwidth (pinned memory), and each node's PCIe links
  as nvidia-smi reads them during that copy (an idle GPU lowers its link's generation);
- on GPUs, each node's NVLink error counters (`nvidia-smi nvlink -e`) once the load is over:
  the health check compares them with its reading from before the collectives.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

# Each measurement repeats its operation until this long has passed (or MAX_REPEATS).
MIN_SECONDS, MAX_REPEATS = 0.2, 20


def timed(
    operation: Callable[[], object],
    sync: Callable[[], None],
    group: dist.ProcessGroup | None,
    device: torch.device,
) -> float:
    """Seconds per call: one warm-up, then as many calls as fill MIN_SECONDS. Every member of
    the group makes the same number of calls (the most any of them wants), or they would
    wait for each other forever."""
    start = time.perf_counter()
    operation()
    sync()
    wanted = min(MAX_REPEATS, max(1, math.ceil(MIN_SECONDS / (time.perf_counter() - start))))
    count = torch.tensor([wanted], dtype=torch.int64, device=device)
    dist.all_reduce(count, op=dist.ReduceOp.MAX, group=group)
    start = time.perf_counter()
    for _ in range(int(count.item())):
        operation()
        sync()
    return (time.perf_counter() - start) / int(count.item())


def sweep(sizes: list[int], group: dist.ProcessGroup | None, device: torch.device) -> list[dict]:
    """all_reduce of each size over the group: nccl-tests' figures."""
    members = dist.get_world_size(group)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rows = []
    for size in sizes:
        tensor = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
        seconds = timed(lambda t=tensor: dist.all_reduce(t, group=group), sync, group, device)
        algbw = size / seconds
        rows.append({"size": size, "seconds": seconds, "algbw": algbw,
                     "busbw": algbw * 2 * (members - 1) / members})  # fmt: skip
    return rows


def agreed_count(wanted: int, peer: int, device: torch.device) -> int:
    """The larger of this rank's and its peer's repeat counts, exchanged point to point: both
    must make the same number of calls."""
    mine = torch.tensor([wanted], dtype=torch.int64, device=device)
    theirs = torch.zeros(1, dtype=torch.int64, device=device)
    exchange_tensors(mine, theirs, peer)
    return max(wanted, int(theirs.item()))


def exchange_tensors(send: torch.Tensor, receive: torch.Tensor, peer: int) -> None:
    """Send one tensor to the peer and receive one from it, at once."""
    requests = dist.batch_isend_irecv(
        [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, receive, peer)]
    )
    for request in requests:
        request.wait()


def timed_pair(
    operation: Callable[[], object], sync: Callable[[], None], peer: int, device: torch.device
) -> float:
    """timed() for two ranks that share no process group but the world's."""
    start = time.perf_counter()
    operation()
    sync()
    wanted = min(MAX_REPEATS, max(1, math.ceil(MIN_SECONDS / (time.perf_counter() - start))))
    count = agreed_count(wanted, peer, device)
    start = time.perf_counter()
    for _ in range(count):
        operation()
        sync()
    return (time.perf_counter() - start) / count


def pair_sweep(sizes: list[int], peer: int, device: torch.device) -> list[dict]:
    """Each size sent both ways at once between this rank and its peer. A ring all_reduce of
    two ranks moves the same bytes (each sends the whole message and receives it), so its
    figures are nccl-tests' all_reduce figures for the pair: busbw = algbw = size / time."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rows = []
    for size in sizes:
        send = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
        receive = torch.empty_like(send)
        seconds = timed_pair(lambda s=send, r=receive: exchange_tensors(s, r, peer), sync, peer,
                             device)  # fmt: skip
        rows.append({"size": size, "seconds": seconds, "algbw": size / seconds,
                     "busbw": size / seconds})  # fmt: skip
    return rows


def one_way(size: int, sender: int, receiver: int, device: torch.device) -> float | None:
    """Bytes per second from sender to receiver (global ranks), as the receiver measures it."""
    tensor = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if dist.get_rank() == sender:
        timed_pair(lambda: dist.send(tensor, receiver), sync, receiver, device)
        return None
    return size / timed_pair(lambda: dist.recv(tensor, sender), sync, sender, device)


def pair_tests(
    rounds: list, leader: dict[int, int], sizes: list[int], device: torch.device
) -> tuple[dict, list[float]]:
    """This rank's part of the pair tests: for each pair it belongs to, the sweep and the
    direction it received; and each round's seconds. The pairs talk point to point on the
    world's process group: no group per pair, so nothing in the setup grows with the number
    of pairs (a new_group is a barrier of the whole world: N (N - 1) / 2 of them grew with
    N squared). NCCL connects each pair's two ranks on their first send, in parallel across
    the pairs of a round."""
    rank, results, seconds = dist.get_rank(), {}, []
    for pairs in rounds:
        started = time.perf_counter()
        for a, b in pairs:
            if rank in (leader[a], leader[b]):
                peer = leader[b] if rank == leader[a] else leader[a]
                results[f"{a}-{b}"] = {
                    "sweep": pair_sweep(sizes, peer, device),
                    "forward": one_way(sizes[-1], leader[a], leader[b], device),
                    "backward": one_way(sizes[-1], leader[b], leader[a], device),
                }
        dist.barrier()  # the next round starts when every pair of this one is done
        seconds.append(time.perf_counter() - started)
    return results, seconds


def node_tests(
    everyone: list, size: int, device: torch.device
) -> tuple[dict[int, dict] | None, dict[str, object]]:
    """all_reduce over every rank of each node at once (this rank's node's sweep, None with
    one rank per node), then, on GPUs, this GPU's host-to-GPU copy."""
    nodes = sorted({node for node, _, _ in everyone})
    ranks = {node: sorted(r for n, _, r in everyone if n == node) for node in nodes}
    # Created by every rank, in the same order (a collective of the whole world).
    groups = {node: dist.new_group(ranks[node]) for node in nodes if len(ranks[node]) > 1}
    mine = next(node for node, _, rank in everyone if rank == dist.get_rank())
    inside = None
    if mine in groups:
        row = sweep([size], groups[mine], device)[-1]
        inside = {"ranks": len(ranks[mine]), **row}
    dist.barrier()
    copy: dict[str, object] = {}
    if device.type == "cuda":
        copy = host_to_gpu(device, local_rank_zero=int(os.environ["LOCAL_RANK"]) == 0)
    return ({mine: inside} if inside else None), copy


PCIE_QUERY = (
    "index,pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,pcie.link.gen.hostmax,"
    "pcie.link.width.current,pcie.link.width.max"
)
COPY_BYTES = 256 * 2**20


def host_to_gpu(device: torch.device, local_rank_zero: bool) -> dict[str, object]:
    """Bytes per second from pinned host memory to this GPU; on each node's local rank 0,
    nvidia-smi's PCIe readings taken while every GPU of the node copies."""
    host = torch.ones(COPY_BYTES // 4, dtype=torch.float32).pin_memory()
    target = torch.empty_like(host, device=device)

    def copy() -> None:
        target.copy_(host, non_blocking=True)

    reading = None
    if local_rank_zero:
        fields = subprocess.run(
            ["nvidia-smi", "--help-query-gpu"], capture_output=True, text=True, check=False
        ).stdout
        # The host's maximum came with later drivers; without it, the GPU's maximum.
        query = (
            PCIE_QUERY
            if "pcie.link.gen.hostmax" in fields
            else PCIE_QUERY.replace("pcie.link.gen.hostmax,", "")
        )
        reading = subprocess.Popen(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    flag = torch.zeros(1, dtype=torch.int64, device=device)
    # Every GPU of the node keeps copying until local rank 0's reading is done (at most 10 s).
    started = time.monotonic()
    while True:
        copy()
        torch.cuda.synchronize()
        flag.fill_(int(reading is not None and reading.poll() is None))
        if time.monotonic() - started > 10:
            flag.fill_(0)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if not int(flag.item()):
            break
    found: dict[str, object] = {
        "h2d": COPY_BYTES / timed(copy, torch.cuda.synchronize, None, device)
    }
    if reading is not None:
        out, _ = reading.communicate()
        found["pcie"] = out if reading.returncode == 0 else ""
        # After the node's all_reduce (NVLink's load) and the copies.
        counters = subprocess.run(
            ["nvidia-smi", "nvlink", "-e"], capture_output=True, text=True, check=False
        )
        found["nvlink_errors"] = counters.stdout if counters.returncode == 0 else ""
    return found


def best_of(passes: list[dict]) -> dict:
    """This rank's pair results over several passes, the best of each figure: a link that is
    slow is slow in every pass, while a pass slowed by other traffic (or, on a shared machine,
    by the scheduler) is not the link's fault."""
    best: dict = {}
    for results in passes:
        for key, result in results.items():
            if key not in best:
                best[key] = {**result, "sweep": [dict(row) for row in result["sweep"]]}
                continue
            kept = best[key]
            for row, new in zip(kept["sweep"], result["sweep"], strict=True):
                if new["busbw"] > row["busbw"]:
                    row.update(new)
            for side in ("forward", "backward"):
                if result[side] is not None and (kept[side] is None or result[side] > kept[side]):
                    kept[side] = result[side]
    return best


def merge(parts: list[dict]) -> dict:
    """Both members' parts of each pair: each measured one direction."""
    merged: dict = {}
    for part in parts:
        for key, result in part.items():
            pair = merged.setdefault(key, {"sweep": result["sweep"]})
            for side in ("forward", "backward"):
                if result[side] is not None:
                    pair[side] = result[side]
    return merged


def node_figures(found: list) -> dict:
    """Each node's figures, by node rank: its all_reduce over all its ranks, its slowest
    GPU's host-to-GPU copy, its PCIe readings under load and its NVLink error counters after
    the load."""
    inside, h2d, pcie, nvlink = {}, {}, {}, {}
    for node, sweep_row, copy in found:
        if sweep_row:
            inside.update({str(k): v for k, v in sweep_row.items()})
        if copy.get("h2d"):
            h2d[str(node)] = min(h2d.get(str(node), math.inf), copy["h2d"])
        if copy.get("pcie"):
            pcie[str(node)] = copy["pcie"]
        if copy.get("nvlink_errors"):
            nvlink[str(node)] = copy["nvlink_errors"]
    return {
        "inside_nodes": inside,
        "h2d": h2d,
        "pcie_under_load": pcie,
        "nvlink_errors_after": nvlink,
    }


def show(report: dict) -> None:
    """nccl-tests-like lines."""
    for row in report["group"]:
        print(
            f"group {row['size']:>12} B {row['seconds'] * 1e6:10.1f} us "
            f"algbw {row['algbw'] / 1e9:7.3f} GB/s busbw {row['busbw'] / 1e9:7.3f} GB/s",
            flush=True,
        )
    for key, result in sorted(report["pairs"].items()):
        busbw, there, back = result["sweep"][-1]["busbw"], result["forward"], result["backward"]
        print(
            f"pair {key:>7} busbw {busbw / 1e9:7.3f} GB/s, "
            f"one way {there / 1e9:7.3f} / {back / 1e9:7.3f} GB/s",
            flush=True,
        )
    for node, row in sorted(report.get("inside_nodes", {}).items()):
        busbw = row["busbw"] / 1e9
        print(f"node {node:>7} {row['ranks']} ranks busbw {busbw:7.3f} GB/s", flush=True)
    for node, rate in sorted(report.get("h2d", {}).items()):
        print(f"node {node:>7} host-to-GPU {rate / 1e9:7.3f} GB/s (slowest GPU)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", required=True, help="message sizes in bytes, comma-separated")
    parser.add_argument("--rounds", default="", help="node pairs: 'a-b,c-d;a-c,b-d' (node ranks)")
    parser.add_argument("--passes", type=int, default=2, help="passes over the pairs (best kept)")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    rounds = [
        [tuple(int(n) for n in pair.split("-")) for pair in part.split(",")]
        for part in args.rounds.split(";")
        if part
    ]
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    try:
        world = dist.get_world_size()
        # Each node's representative: its local rank 0 (GROUP_RANK is torchrun's node rank).
        me = (int(os.environ["GROUP_RANK"]), int(os.environ["LOCAL_RANK"]), dist.get_rank())
        everyone: list = [None] * world
        dist.all_gather_object(everyone, me)
        leader = {node: rank for node, local, rank in everyone if local == 0}
        group = sweep(sizes, None, device)
        parts: list = [None] * world
        # Each pass runs every round; the pair figures are the best of the passes, and each
        # round's seconds those of all its passes.
        passes = [pair_tests(rounds, leader, sizes, device) for _ in range(args.passes)]
        mine = best_of([found for found, _ in passes])
        round_seconds = [sum(times) for times in zip(*(took for _, took in passes), strict=True)]
        dist.all_gather_object(parts, mine)
        inside, copy = node_tests(everyone, sizes[-1], device)
        found: list = [None] * world
        dist.all_gather_object(found, (me[0], inside, copy))
        if dist.get_rank() == 0:
            report = {
                "backend": dist.get_backend(),
                "world_size": world,
                "nodes": len(leader),
                "group": group,
                "pairs": merge(parts),
                "pair_round_seconds": round_seconds,
                **node_figures(found),
            }
            show(report)
            with open("collectives.json", "w") as handle:
                json.dump(report, handle, indent=2)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
