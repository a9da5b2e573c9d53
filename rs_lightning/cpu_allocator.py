"""The CPU memory allocator setting that certification and training share."""

from __future__ import annotations

import ctypes
import functools
import os
import platform


@functools.cache  # a process-wide setting: execute() asks for it, and so does every spawned DDP rank
def tune_cpu_allocator() -> bool:
    """Keep freed activation buffers in glibc's heap instead of returning them to the OS.

    With glibc defaults, every large CPU forward pass mmaps and page-faults its activations anew (high
    ``sys`` time; bench/README.md: batches of 1,000 were slower per sample than batches of 400). Same
    effect as ``MALLOC_MMAP_THRESHOLD_=32MiB MALLOC_TRIM_THRESHOLD_=2GiB MALLOC_TOP_PAD_=512MiB``. No-op
    off glibc or when ``RS_LIGHTNING_DEFAULT_MALLOC=1``.
    """
    if os.environ.get("RS_LIGHTNING_DEFAULT_MALLOC") == "1" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3  # glibc <malloc.h>
    settings = ((m_mmap_threshold, 32 << 20), (m_trim_threshold, (1 << 31) - 1), (m_top_pad, 512 << 20))
    return all(libc.mallopt(option, value) for option, value in settings)
