"""A CPU platform for veRL 0.9.1, for tests only: lets ``verl.trainer.sft_trainer`` run on a machine
without a GPU. Loaded in the trainer's process by ``VERL_USE_EXTERNAL_MODULES=verl_cpu_platform``
(this folder on ``PYTHONPATH``) and selected by ``VERL_PLATFORM=cpu``; see test_verl_sft_trainer.py.

Why it is needed (veRL 0.9.1):

- veRL registers only the ``nvidia``, ``npu`` and ``rocm`` platforms and falls back to ``nvidia``
  when none is detected (``verl/plugin/platform/platform_manager.py``, ``_detect_platform_name``),
  so without a GPU the trainer asks for NCCL (``verl/utils/distributed.py:63``,
  ``initialize_global_process_group``: "Distributed package doesn't have NCCL built in") and for
  ``torch.cuda``. :class:`PlatformCPU` is registered through veRL's own ``PlatformRegistry``: device
  ``cpu``, backend ``gloo``, a device module that answers veRL's ``torch.cuda`` calls (memory
  statistics: 0; RNG state: the CPU generator's).
- The one monkeypatch: ``verl.utils.distributed.initialize_global_process_group`` builds the backend
  string ``"cpu:gloo,{device}:{backend}"``, which torch rejects when the device is ``cpu``
  ("Duplicate device type cpu"). The replacement calls ``init_process_group`` with plain ``gloo``
  and otherwise does what veRL's does (timeout, ``DIST_INIT_METHOD``, returns local rank, rank and
  world size; ``set_device`` is a no-op on the CPU). ``sft_trainer.run_sft`` imports the function
  when it is called, so it gets the replacement.

Nothing of veRL's installed files is changed.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from datetime import timedelta

import torch
import torch.distributed
import verl.utils.distributed as _verl_distributed
from verl.plugin.platform import PlatformBase, PlatformRegistry


class _CPUDeviceModule:
    """``torch.cpu``, plus the ``torch.cuda`` calls veRL makes on its device module."""

    def __getattr__(self, name):
        return getattr(torch.cpu, name)

    def is_available(self):
        return True

    def memory_allocated(self, *args, **kwargs):
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    def mem_get_info(self, *args, **kwargs):
        return 0, 0

    def empty_cache(self):
        pass

    def reset_peak_memory_stats(self, *args, **kwargs):
        pass

    def set_per_process_memory_fraction(self, *args, **kwargs):
        pass

    def get_device_name(self, *args, **kwargs):
        return "cpu"

    def get_rng_state(self, *args, **kwargs):
        return torch.get_rng_state()

    def set_rng_state(self, state, *args, **kwargs):
        torch.set_rng_state(state)

    def manual_seed(self, seed):
        torch.manual_seed(seed)

    manual_seed_all = manual_seed


_DEVICE_MODULE = _CPUDeviceModule()


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    """veRL's platform interface on the CPU (gloo)."""

    @property
    def device_name(self):
        return "cpu"

    @property
    def vendor_name(self):
        return "cpu"

    @property
    def device_module(self):
        return _DEVICE_MODULE

    def is_available(self):
        return True

    def is_platform_available(self, use_smi_check=False):
        return False  # never auto-detected: only VERL_PLATFORM=cpu selects it

    def current_device(self):
        return "cpu"  # as torch.cpu.current_device(): veRL passes it to .to() and to FSDP as device_id

    def device_count(self):
        return 1

    def set_device(self, device_index):
        pass

    def synchronize(self, device_index=None):
        pass

    def manual_seed(self, seed):
        torch.manual_seed(seed)

    def manual_seed_all(self, seed):
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings):
        pass

    def empty_cache(self):
        pass

    def get_device_capability(self, device_index=0):
        return None, None

    def communication_backend_name(self):
        return "gloo"

    def visible_devices_envvar(self):
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg):
        yield

    def profiler_start(self):
        pass

    def profiler_stop(self):
        pass

    def ray_resource_name(self):
        return "CPU"

    def ray_noset_envvars(self):
        return []

    def is_ipc_supported(self):
        return False

    def cudart(self):
        return None


def initialize_global_process_group(timeout_second=36000):
    """veRL's, with the backend ``gloo`` instead of ``cpu:gloo,cpu:gloo`` (which torch rejects)."""
    torch.distributed.init_process_group(
        backend="gloo",
        timeout=timedelta(seconds=timeout_second),
        init_method=os.environ.get("DIST_INIT_METHOD", None),
    )
    return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


_verl_distributed.initialize_global_process_group = initialize_global_process_group
