"""vLLM's waiting queues: FCFS a deque with preempted requests at the front; priority the order of
`Request.__lt__` (one priority: arrival), whatever the order of pushes and pops."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kvtier.sim.servers.vllm_queue import FcfsQueue, PriorityQueue

# an operation: push a rank (front or not), or pop the head (None)
OPS = st.lists(st.one_of(st.none(), st.tuples(st.integers(0, 10_000), st.booleans())), max_size=300)


@given(OPS)
def test_priority_pops_the_lowest_rank_as_a_sorted_list_would(
    ops: list[tuple[int, bool] | None],
) -> None:
    queue: PriorityQueue[int] = PriorityQueue(lambda rank: rank)
    reference: list[int] = []
    for op in ops:
        if op is None:
            if reference:
                assert queue.peek() == min(reference)
                reference.remove(queue.popleft())
            continue
        rank, front = op
        if rank in reference:
            continue  # ranks are unique (a request's rid)
        (queue.prepend if front else queue.add)(rank)
        reference.append(rank)
        assert len(queue) == len(reference)
    assert list(queue) == sorted(reference)


def test_fcfs_puts_a_preempted_request_first() -> None:
    queue: FcfsQueue[str] = FcfsQueue()
    for item in ("a", "b"):
        queue.add(item)
    queue.prepend("preempted")
    assert list(queue) == ["preempted", "a", "b"]
    assert (queue.popleft(), queue.peek(), len(queue)) == ("preempted", "a", 2)
