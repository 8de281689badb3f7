"""The accelerator side of a training step: simulated, or a real model on a GPU.

``SimulatedAccelerator`` is MLPerf Storage's approach: a fixed compute time per batch
(a sleep, during which the loader's workers keep reading). ``TorchGpuAccelerator``
runs real forward/backward/optimizer steps of a small convolutional network on the
GPU, fed with the first bytes of every sample, and times them with a CUDA
synchronise. A modern GPU runs one such step of a 32-sample batch in a millisecond or
two, which would make every contender data-bound; so it runs as many passes per batch
as fill the same time per batch as the simulated accelerator (calibrated at start),
and the data demand stays the experiment's. ``NvmlSampler`` samples the GPU's own
utilisation counter alongside.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from typing import Protocol

from .loader import Batch

IMAGE_SHAPE = (3, 32, 32)
FEATURE_BYTES = 3 * 32 * 32  # bytes of each sample fed to the real model


class Accelerator(Protocol):
    name: str
    feature_bytes: int

    def step(self, batch: Batch) -> float:
        """Run one training step on *batch*; return the seconds it kept the device busy."""
        ...


class SimulatedAccelerator:
    feature_bytes = 0

    def __init__(self, step_s: float) -> None:
        self.step_s = step_s
        self.name = f"simulated ({step_s * 1000:g} ms per batch)"

    def step(self, batch: Batch) -> float:
        t0 = time.perf_counter()
        time.sleep(self.step_s)
        return time.perf_counter() - t0


class TorchGpuAccelerator:
    """Real steps on ``cuda:0`` (or *device*): conv net, cross-entropy, SGD; with
    *step_s*, as many passes per batch as take about that long (at least one)."""

    feature_bytes = FEATURE_BYTES

    def __init__(self, device: str = "cuda", step_s: float | None = None,
                 batch_size: int = 32) -> None:
        import torch
        from torch import nn

        self.torch = torch
        self.device = torch.device(device)
        self.model = nn.Sequential(
            nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(),
            nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(128, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(256 * 8 * 8, 1000),
        ).to(self.device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.loss = nn.CrossEntropyLoss()
        name = (torch.cuda.get_device_name(self.device) if self.device.type == "cuda"
                else str(self.device))
        self.passes = 1
        if step_s:
            self.passes = max(1, round(step_s / self._calibrate(batch_size)))
        self.name = f"torch conv net on {name}, {self.passes} pass(es) per batch"

    def _calibrate(self, batch_size: int) -> float:
        """Seconds of one pass over a random batch, after warm-up (cuDNN picks its kernels)."""
        raw = os.urandom(batch_size * FEATURE_BYTES)
        batch = Batch(index=-1, samples=batch_size, nbytes=len(raw), features=raw)
        for _ in range(5):
            self._pass(batch)
        self._sync()
        t0 = time.perf_counter()
        for _ in range(20):
            self._pass(batch)
        self._sync()
        return (time.perf_counter() - t0) / 20

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def step(self, batch: Batch) -> float:
        if batch.features is None:
            raise ValueError("a real model step needs sample bytes (feature_bytes > 0)")
        t0 = time.perf_counter()
        for _ in range(self.passes):
            self._pass(batch)
        self._sync()
        return time.perf_counter() - t0

    def _pass(self, batch: Batch) -> None:
        torch = self.torch
        raw = torch.frombuffer(bytearray(batch.features), dtype=torch.uint8)
        x = raw.view(batch.samples, *IMAGE_SHAPE).to(self.device, non_blocking=True)
        x = x.float().div_(255.0)
        y = raw.view(batch.samples, -1)[:, 0].long().to(self.device) % 1000
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss(self.model(x), y)
        loss.backward()
        self.opt.step()


class NvmlSampler:
    """Mean GPU utilisation (NVML's own counter, percent) over a window, sampled in a
    thread every *interval* seconds. Keeps a running sum, not the samples."""

    def __init__(self, index: int = 0, interval: float = 0.1) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pynvml
        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.interval = interval
        self._sum = 0
        self._n = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            util = self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu
            with self._lock:
                self._sum += util
                self._n += 1

    def window(self) -> float | None:
        """Mean utilisation (0-100) since the last call; None when nothing was sampled."""
        with self._lock:
            mean = self._sum / self._n if self._n else None
            self._sum, self._n = 0, 0
        return mean

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.nvml.nvmlShutdown()


def gpu_count() -> int:
    """GPUs NVML can see; 0 when pynvml or the driver is missing."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pynvml
        pynvml.nvmlInit()
    except Exception:
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


def choose(kind: str, step_s: float,
           batch_size: int = 32) -> tuple[Accelerator, NvmlSampler | None, str]:
    """'sim', 'gpu' or 'auto' -> (accelerator, sampler or None, why this one)."""
    if kind == "sim":
        return SimulatedAccelerator(step_s), None, "asked for the simulated accelerator"
    n = gpu_count()
    if kind == "auto" and n == 0:
        return SimulatedAccelerator(step_s), None, "no GPU found by NVML"
    if n == 0:
        raise RuntimeError("--accelerator gpu: NVML finds no GPU (pynvml or driver missing)")
    try:
        import torch
    except ImportError as e:
        if kind == "gpu":
            raise RuntimeError("--accelerator gpu needs torch with CUDA") from e
        return SimulatedAccelerator(step_s), None, "GPU found but torch is not installed"
    if not torch.cuda.is_available():
        if kind == "gpu":
            raise RuntimeError("--accelerator gpu: torch.cuda.is_available() is False")
        return SimulatedAccelerator(step_s), None, "GPU found but torch has no CUDA"
    accel = TorchGpuAccelerator(step_s=step_s, batch_size=batch_size)
    return accel, NvmlSampler(), f"{n} GPU(s) found by NVML"
