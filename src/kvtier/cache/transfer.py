"""Asynchronous, layer-by-layer page copies between two tiers.

One worker thread takes batches from a FIFO queue and copies them one layer at a time; the
handle of a batch records each layer as it lands, so a consumer can run layer i while later
layers are still in flight (the layer-wise overlap SGLang HiCache gets from its per-layer
load counter). Batches run in submission order, so a copy submitted after another that writes
the same pages sees its result.

On a GPU the worker issues copies on its own CUDA stream, ordered after the work the submitting
thread had queued on its current stream, and records one event per layer; waiting on a layer
waits for its event. Without a GPU the copies are plain CPU work on the worker thread, a few
layers per op when a layer of the batch is small (`PageCopy.layers_at_once`).

The engine owns no pages: the caller keeps the source and destination pages allocated (locked)
until the handle is done.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from kvtier.cache.page_copy import PageCopy
from kvtier.cache.storage import PageStorage
from kvtier.cache.tensor_storage import TensorStorage

if TYPE_CHECKING:
    import torch


class TransferError(RuntimeError):
    """A batch of page copies failed on the worker; the cause is chained."""


class _LayerCopy(Protocol):
    num_layers: int
    layers_at_once: int

    def copy_layers(self, first: int, end: int) -> None: ...


class _WholeCopy:
    """Storages without layers (accounting): the whole batch counts as one layer."""

    num_layers = 1
    layers_at_once = 1

    def __init__(
        self, src: PageStorage, src_pages: list[int], dst: PageStorage, dst_pages: list[int]
    ) -> None:
        self._args = (src, src_pages, dst, dst_pages)

    def copy_layers(self, first: int, end: int) -> None:
        src, src_pages, dst, dst_pages = self._args
        src.copy_pages(src_pages, dst, dst_pages)


class LayerHandle:
    """Progress of one batch: which layers have landed, and the worker's error if any.

    A batch between storages without layers (`whole`) lands at once: waiting on any layer
    waits for all of it."""

    def __init__(self, num_layers: int, *, whole: bool = False) -> None:
        self.num_layers = num_layers
        self.whole = whole
        self._lock = threading.Lock()
        self._landed = 0  # layers [0, _landed) have been issued (CPU: copied)
        self._events: list[Any] = []  # CUDA: one event per issued layer
        self._error: BaseException | None = None
        # a waiter sleeps on the flag of the layer it needs: one wake-up, not one per layer
        self._flags: dict[int, threading.Event] = {}

    def done(self) -> bool:
        """True once every layer has landed or the batch failed."""
        with self._lock:
            if self._error is not None:
                return True
            if self._landed < self.num_layers:
                return False
            events = list(self._events)
        return all(event.query() for event in events)

    def wait(self) -> None:
        """Block until the whole batch has landed; raise `TransferError` if it failed."""
        self._wait_issued(self.num_layers - 1)
        with self._lock:
            error, events = self._error, list(self._events)
        if error is not None:
            raise TransferError("page copy failed") from error
        for event in events:
            event.synchronize()

    def wait_layer(self, layer: int) -> None:
        """Block until `layer` of every page in the batch has landed.

        Raises `TransferError` if the batch failed before that layer landed.
        """
        if self.whole:
            layer = self.num_layers - 1
        elif not 0 <= layer < self.num_layers:
            raise ValueError(f"layer {layer} out of range [0, {self.num_layers})")
        self._wait_issued(layer)
        with self._lock:
            if self._landed <= layer:
                raise TransferError("page copy failed") from self._error
            event = self._events[layer] if self._events else None
        if event is not None:
            event.synchronize()

    def _wait_issued(self, layer: int) -> None:
        with self._lock:
            if self._landed > layer or self._error is not None:
                return
            flag = self._flags.setdefault(layer, threading.Event())
        flag.wait()

    def _landed_layer(self, event: Any = None) -> None:
        with self._lock:
            if event is not None:
                self._events.append(event)
            self._landed += 1
            flag = self._flags.pop(self._landed - 1, None)
        if flag is not None:
            flag.set()

    def _fail(self, error: BaseException) -> None:
        with self._lock:
            self._error = error
            flags, self._flags = list(self._flags.values()), {}
        for flag in flags:
            flag.set()


_Job = tuple[Callable[[], _LayerCopy], LayerHandle, Any]


class AsyncTransfer:
    """A `TransferEngine` with a worker thread, and a CUDA stream when a GPU is present."""

    def __init__(self, *, use_cuda: bool | None = None) -> None:
        import torch

        self._cuda = torch.cuda.is_available() if use_cuda is None else use_cuda
        self._stream: torch.cuda.Stream | None = torch.cuda.Stream() if self._cuda else None
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="kvtier-transfer", daemon=True)
        self._thread.start()

    def submit(
        self, src: PageStorage, src_pages: Sequence[int], dst: PageStorage, dst_pages: Sequence[int]
    ) -> LayerHandle:
        """Queue a copy of `src_pages` of `src` into `dst_pages` of `dst`.

        The batch is checked here (ValueError on a bad one) and planned on the worker: the
        caller pays only the checks, and on a GPU the plan's tensors belong to the worker's
        stream, where they are used."""
        plan: Callable[[], _LayerCopy]
        if isinstance(src, TensorStorage):
            plan = partial(PageCopy.plan, src, *src.check_copy(src_pages, dst, dst_pages))
            handle = LayerHandle(src.layout.num_layers)
        else:
            if len(src_pages) != len(dst_pages):
                raise ValueError("source and destination page counts differ")
            plan = partial(_WholeCopy, src, list(src_pages), dst, list(dst_pages))
            handle = LayerHandle(1, whole=True)
        with self._lock:
            if self._closed:
                raise RuntimeError("transfer engine is closed")
            self._queue.put((plan, handle, self._ready_event()))
        return handle

    def close(self) -> None:
        """Finish every queued batch, then stop the worker."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(None)
        self._thread.join()

    def __enter__(self) -> AsyncTransfer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ready_event(self) -> Any:
        """An event after the submitter's queued GPU work (e.g. the KV it just wrote)."""
        if self._stream is None:
            return None
        import torch

        event = torch.cuda.Event()
        event.record()
        return event

    def _run(self) -> None:
        while (job := self._queue.get()) is not None:
            plan, handle, ready = job
            try:
                if self._stream is None:
                    copy = plan()
                    step = copy.layers_at_once
                    for first in range(0, copy.num_layers, step):
                        end = min(first + step, copy.num_layers)
                        copy.copy_layers(first, end)
                        for _ in range(first, end):
                            handle._landed_layer()
                else:
                    self._run_on_stream(plan, handle, ready)
            except Exception as error:  # surfaces on the handle's wait()
                handle._fail(error)

    def _run_on_stream(
        self, plan: Callable[[], _LayerCopy], handle: LayerHandle, ready: Any
    ) -> None:
        import torch

        stream = self._stream
        assert stream is not None
        with torch.cuda.stream(stream):
            stream.wait_event(ready)
            copy = plan()
            for layer in range(copy.num_layers):
                copy.copy_layers(layer, layer + 1)
                event = torch.cuda.Event()
                event.record(stream)
                handle._landed_layer(event)
