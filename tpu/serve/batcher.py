"""Dynamic batching of one model's requests onto the device pool.

Requests (quantized IR arrays of a few samples each) wait until their
samples fill the model's compiled batch or the oldest has waited
`max_delay` seconds; then they are joined, cut into chunks of the batch
(the last padded with the zero point), each chunk is a job of the pool, and
the outputs are split back per request. Admission is bounded: past
`max_queue` requests waiting or running, `submit` raises `Overloaded`
before anything is queued.
"""

import asyncio
import time

import numpy as np


__all__ = ["Batcher", "Overloaded"]


class Overloaded(Exception):
    """The queue is full: the caller should retry after `retry_after` seconds."""

    def __init__(self, message, retry_after):
        super().__init__(message)
        self.retry_after = retry_after


class _Pending:
    __slots__ = ("arrays", "samples", "future", "arrived")

    def __init__(self, arrays, samples, future):
        self.arrays, self.samples, self.future = arrays, samples, future
        self.arrived = time.monotonic()


class Batcher:
    """Gathers requests for `session` (an `InferenceSession` with a pool).

    observe : callable(event, **values) or None
        Hears ``("batch", samples=, requests=)`` for each chunk sent and
        ``("queue", requests=, samples=)`` when the queue changes.
    """

    def __init__(self, session, *, max_delay=0.005, max_queue=512, observe=None):
        self.session = session
        self.pool = session.pool
        self.batch = session.batch
        self.max_delay = max_delay
        self.max_queue = max_queue
        self.observe = observe or (lambda event, **values: None)
        self._pending = []
        self._pending_samples = 0
        self._admitted = 0              # requests waiting or running
        self._admitted_samples = 0
        self._timer = None
        self._service = 0.05            # seconds per chunk, a running estimate for retry hints

    @property
    def queued(self):
        return self._admitted

    def retry_after(self):
        """Seconds until the queue has room, estimated from the recent service time."""
        devices = max(1, len(self.pool.alive))
        chunks = -(-self._admitted_samples // self.batch)
        return max(1, round(chunks * self._service / devices))

    async def submit(self, arrays, samples):
        """The quantized outputs (IR tensor name -> array) of one request."""
        if self._admitted >= self.max_queue:
            raise Overloaded(f"the server's queue is full ({self._admitted} requests waiting "
                             f"or running, at most {self.max_queue}): retry later",
                             self.retry_after())
        loop = asyncio.get_running_loop()
        item = _Pending(arrays, samples, loop.create_future())
        self._admitted += 1
        self._admitted_samples += samples
        self._pending.append(item)
        self._pending_samples += samples
        self._queue_changed()
        try:
            if self._pending_samples >= self.batch:
                self._flush()
            elif self._timer is None:
                self._timer = loop.call_later(self.max_delay, self._flush)
            return await item.future
        finally:
            self._admitted -= 1
            self._admitted_samples -= samples
            self._queue_changed()

    def _queue_changed(self):
        self.observe("queue", requests=self._admitted, samples=self._admitted_samples)

    def _flush(self):
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._pending:
            # Whole requests up to a batch (one larger request alone);
            # whatever is left over waits for more or for the timer.
            take, samples = [], 0
            for item in self._pending:
                if take and samples + item.samples > self.batch:
                    break
                take.append(item)
                samples += item.samples
            if samples < self.batch and len(take) == len(self._pending) and self._timer is None \
                    and time.monotonic() - take[0].arrived < self.max_delay:
                self._timer = asyncio.get_running_loop().call_later(
                    self.max_delay - (time.monotonic() - take[0].arrived), self._flush)
                return
            del self._pending[:len(take)]
            self._pending_samples -= samples
            asyncio.ensure_future(self._dispatch(take, samples))

    async def _dispatch(self, items, samples):
        try:
            names = list(items[0].arrays)
            joined = {n: np.concatenate([i.arrays[n] for i in items]) for n in names}
            chunks = self.session._chunks(joined, samples)
            for c in range(len(chunks)):
                self.observe("batch", samples=min(self.batch, samples - c * self.batch),
                             requests=len(items))
            started = time.monotonic()
            futures = [asyncio.wrap_future(self.pool.submit(self.session.compiled, [chunk]))
                       for chunk in chunks]
            results = await asyncio.gather(*futures)
            self._service = 0.8 * self._service + 0.2 * (time.monotonic() - started) / len(chunks)
            outputs = {}
            for o in self.session.graph.outputs:
                outputs[o.tensor] = np.concatenate(
                    [np.asarray(r[0][0][o.tensor]) for r in results])[:samples]
        except Exception as error:
            for item in items:
                if not item.future.done():
                    item.future.set_exception(error)
            return
        start = 0
        for item in items:
            if not item.future.done():
                item.future.set_result({n: v[start:start + item.samples]
                                        for n, v in outputs.items()})
            start += item.samples
