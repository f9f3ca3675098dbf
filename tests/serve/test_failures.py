"""Why a server failed, read from its log the way an engineer would."""

from __future__ import annotations

import pytest

from tuner.serve.failures import classify

SEGFAULT_LOG = """\
INFO:     127.0.0.1:48314 - "POST /v1/completions HTTP/1.1" 200 OK
!!!!!!! Segfault encountered !!!!!!!
  File "./signal/../sysdeps/unix/sysv/linux/x86_64/libc_sigaction.c", line 0, in 0x00007f8ac945a04f
  File "/tmp/vllm/csrc/cpu/cpu_fused_moe.cpp", line 242, in fused_moe_impl<c10::BFloat16>
(APIServer pid=4632) ERROR vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered \
an issue. See stack trace (above) for the root cause.
"""


def test_a_segfault_is_a_crash_named_by_its_native_frame_not_by_its_consequences():
    kind, reason = classify(SEGFAULT_LOG, None)
    assert kind == "crash"
    assert reason.startswith("Segfault encountered in fused_moe_impl")
    assert "cpu_fused_moe.cpp:242" in reason


@pytest.mark.parametrize("log, kind, needle", [
    ("Traceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory. Tried",
     "oom", "out of memory"),
    ("ValueError: No available memory for the cache blocks. Try increasing", "oom",
     "No available memory"),
    ("raise NotImplementedError('all_gatherv is not implemented for CPU')", "unsupported",
     "all_gatherv"),
    ("vllm serve: error: unrecognized arguments: --max-num-seqz 4", "invalid_argument",
     "--max-num-seqz"),
    ("pydantic_core._pydantic_core.ValidationError: 1 validation error for ParallelConfig",
     "invalid_argument", "ParallelConfig"),
])
def test_log_patterns(log, kind, needle):
    got_kind, reason = classify(log, 1)
    assert (got_kind, needle in reason) == (kind, True)


def test_without_a_telling_line_the_exit_status_speaks():
    assert classify("loading...\n", -9) == ("crash", "server killed by SIGKILL")
    assert classify("loading...\n", 3) == ("crash", "server exited with status 3: loading...")


def test_an_exception_without_a_message_is_named_by_the_frame_that_raised_it():
    log = """\
(Worker_DP1_EP1 pid=1) ERROR [multiproc_executor.py:1063]   File "/x/vllm/distributed/device_communicators/base_device_communicator.py", line 296, in all_gatherv
(Worker_DP1_EP1 pid=1) ERROR [multiproc_executor.py:1063]     raise NotImplementedError
(Worker_DP1_EP1 pid=1) ERROR [multiproc_executor.py:1063] NotImplementedError
"""  # noqa: E501
    assert classify(log, None) == (
        "unsupported", "NotImplementedError in all_gatherv (base_device_communicator.py:296)")


def test_the_root_cause_is_the_telling_line_nearest_the_exit_not_an_early_warning():
    log = """\
INFO 12-02 02:00:01 [cpu.py:88] Loading model /models/tiny-gpt-oss
WARNING 12-02 02:00:02 [cpu.py:120] Pin memory is not supported on CPU, falling back
INFO 12-02 02:00:04 [core.py:91] Initializing the engine
ERROR 12-02 02:00:05 [core.py:700] ValueError: max_num_batched_tokens (16) is smaller than \
max_model_len (512)
"""
    kind, reason = classify(log, 1)
    assert kind == "invalid_argument"
    assert "max_num_batched_tokens (16)" in reason

