"""The names that say communication, by library: which family a kernel comes from and its op.

Traces of NCCL collectives carry their metadata; the kernels of expert-parallel libraries (DeepEP
and its forks, pplx-kernels, mori, TensorRT-LLM's MoE all-to-all), of custom all-reduces (vLLM,
SGLang, TensorRT-LLM, FlashInfer), of PyTorch's SymmetricMemory, NVSHMEM, TransformerEngine's
userbuffers and MSCCL/MSCCL++ carry none, so their names are all that says they communicate. Each
rule below is one regular expression (RE2 and Python syntax, searched anywhere in the name as
Kineto prints it, demangled: `void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, ...)`), the
family it belongs to and the op the name says (`None`: the name does not say, except NCCL-style
names, whose op `kernel_collective` in sql/macros.sql reads). The first rule that matches wins, so
specific rules come before general ones. Rules match the structure a family gives its names (a
namespace and kernel, template flags), so renamed forks match too and compute kernels that share a
word (`deep_ep::layout::get_dispatch_layout`, `flashinfer::trtllm_allreduce::...::rms_norm_kernel`)
do not. tests/test_comm_kernels.py holds, for each family, real names and the file they come from.

`settings.BUILTIN_COMM_PATTERNS` (which kernels are communication) and the session variables of
`comm_kernel_match` in sql/macros.sql (which family and op) both come from here, so the two cannot
disagree.
"""

from __future__ import annotations

from typing import NamedTuple


class CommKernelRule(NamedTuple):
    family: str
    pattern: str
    op: str | None


# A name, or a namespace, starts at the start of the name or after a space or `::`.
_START = r"(?:^|[\s:])"

# TensorRT-LLM's communication kernels, which FlashInfer ports under `flashinfer::`: (name, op).
_TRTLLM_KERNELS: tuple[tuple[str, str], ...] = (
    (r"allreduce_fusion_kernel_(?:oneshot|twoshot)\w*", "allreduce"),
    (r"moe(?:finalize|reduce)_allreduce_fusion_kernel_oneshot_lamport", "allreduce"),
    (r"(?:one|two)ShotAllReduceKernel", "allreduce"),
    (r"(?:oneshot|twoshot)Allreduce(?:Fusion)?Kernel", "allreduce"),
    (r"(?:lamport_style_)?one_shot(?:_prenorm)?_all_reduce_norm_kernel", "allreduce"),
    (r"moeA2A(?:Prepare)?(?:Dispatch|Combine)Kernel", "alltoall"),
    (r"moeAllToAllKernel", "alltoall"),
    (r"helixAllToAllKernel", "alltoall"),
)

_DEEPEP_NAMESPACES = r"(?:intranode|internode|internode_ll)::"

RULES: tuple[CommKernelRule, ...] = (
    # MSCCL: microsoft/msccl names its algorithm in NCCL's kernel names; RCCL's MSCCL kernels.
    CommKernelRule("msccl", r"^ncclKernel_[A-Za-z]+_MSCCL_", None),
    CommKernelRule("msccl", r"^mscclKernel_", None),
    # NCCL (and RCCL, which keeps NCCL's names): `ncclKernel_*`, `ncclDevKernel_*`, `ncclSymkDevKernel_*`.
    CommKernelRule("nccl", r"^nccl", None),
    CommKernelRule("nccl", r"ncclDevKernel", None),
    CommKernelRule("nccl", r"ncclKernel", None),
    CommKernelRule("rccl", r"^rccl", None),
    # DeepEP v1 and its forks (`uccl::internode_ll::dispatch`, `deep_ep::legacy::intranode::...`):
    # the namespace says the path, the kernel dispatch or combine (notify_dispatch: the token counts).
    CommKernelRule("deepep", _START + _DEEPEP_NAMESPACES + r"\w*(?:dispatch|combine)\b", "alltoall"),
    CommKernelRule("deepep", _START + _DEEPEP_NAMESPACES + r"barrier\b", "barrier"),
    CommKernelRule("deepep", _START + _DEEPEP_NAMESPACES + r"(?:cached_notify|clean_low_latency_buffer)\b", None),
    # DeepEP v2 (EPv2, JIT-compiled).
    CommKernelRule("deepep", r"\bdeep_ep::elastic::(?:hybrid_)?(?:dispatch|combine)_impl\b", "alltoall"),
    CommKernelRule("deepep", r"\bdeep_ep::elastic::barrier_impl\b", "barrier"),
    CommKernelRule("deepep", r"\bdeep_ep::elastic::pp_send_impl\b", "send"),
    CommKernelRule("deepep", r"\bdeep_ep::elastic::pp_recv_impl\b", "recv"),
    CommKernelRule("deepep", r"\bdeep_ep::elastic::engram_fetch\w*_impl\b", None),
    # pplx-kernels: `dispatchKernel` / `combineKernel` templated on <..., DO_SEND, DO_RECV>.
    CommKernelRule("pplx", _START + r"(?:dispatch|combine)Kernel<[^<>]*\b(?:true|false), (?:true|false)>", "alltoall"),
    # AMD's mori (ROCm): `mori::moe::EpDispatchIntraNodeKernel`, `EpCombineInterNodeKernel`, ...
    CommKernelRule("mori", r"\bmori::moe::(?:\w+::)*Ep(?:Dispatch|Combine)\w*Kernel", "alltoall"),
    # FlashInfer: its ports of TensorRT-LLM's kernels, then its own.
    *(CommKernelRule("flashinfer", r"\bflashinfer::(?:\w+::)*" + name + r"\b", op) for name, op in _TRTLLM_KERNELS),
    CommKernelRule("flashinfer", r"\bflashinfer::mixed_comm::allreduce_kernel\b", "allreduce"),
    CommKernelRule("flashinfer", r"\bflashinfer::mixed_comm::allgather_kernel\b", "allgather"),
    CommKernelRule("flashinfer", r"\bflashinfer::mixed_comm::reducescatter_kernel\b", "reducescatter"),
    CommKernelRule("flashinfer", r"\bflashinfer::mixed_comm::fused_\w+_kernel\b", None),
    CommKernelRule("flashinfer", r"\bflashinfer::comm::pcie_ipc::\w+_kernel\b", "allreduce"),
    CommKernelRule("flashinfer", r"\bflashinfer::comm::ulysses::ulysses_a2a_kernel\b", "alltoall"),
    *(CommKernelRule("trtllm", _START + name + r"\b", op) for name, op in _TRTLLM_KERNELS),
    # vLLM's and SGLang's custom all-reduce (`vllm::` / `sglang::cross_device_reduce_1stage`, ...)
    # and the quick all-reduce both carry (`quickreduce::allreduce_prototype_twoshot`).
    CommKernelRule("custom_allreduce", r"cross_device_reduce", "allreduce"),
    CommKernelRule("custom_allreduce", _START + r"allreduce_prototype_(?:oneshot|twoshot)\b", "allreduce"),
    # PyTorch SymmetricMemory: the one-/two-shot and multimem kernels (file-local, so no namespace;
    # two-shot with reduce_scatter=true is the reduce-scatter), its signal kernels, its NVSHMEM ops.
    CommKernelRule("symm_mem", _START + r"two_shot_all_reduce_kernel<[^<>]*, true, (?:true|false)>", "reducescatter"),
    CommKernelRule("symm_mem", _START + r"(?:multimem_)?(?:one|two)_shot_all_reduce_kernel\w*<", "allreduce"),
    CommKernelRule("symm_mem", _START + r"multimem_all_reduce_kernel<", "allreduce"),
    CommKernelRule("symm_mem", _START + r"multimem_all_gather_kernel<", "allgather"),
    CommKernelRule("symm_mem", r"\bc10d::symmetric_memory::barrier_kernel\b", "barrier"),
    CommKernelRule("symm_mem", r"\bc10d::symmetric_memory::(?:put|wait)_signal_kernel\b", None),
    CommKernelRule("symm_mem", r"\bc10d::nvshmem_extension::(?:allToAllV|exchangeSplitAndOffset)", "alltoall"),
    CommKernelRule("symm_mem", r"\bc10d::nvshmem_extension::", None),
    # TransformerEngine's userbuffers (communication overlapped with GEMMs).
    CommKernelRule("userbuffers", r"\buserbuffers_\w*?_rs(?:_\w*)?\b", "reducescatter"),
    CommKernelRule("userbuffers", r"\buserbuffers_\w*?_ag\b", "allgather"),
    CommKernelRule("userbuffers", r"\buserbuffers_fp16_sum_inplace_gpu_(?:rr|rw|mc)\b", "allreduce"),
    CommKernelRule("userbuffers", r"\bkuserbuffers_(?:push|pull)sendrecv", "sendrecv"),
    CommKernelRule("userbuffers", r"\bkuserbuffers_(?:push|pull)send\b", "send"),
    CommKernelRule("userbuffers", r"\bkuserbuffers_(?:push|pull)recv\b", "recv"),
    CommKernelRule("userbuffers", r"\bkuserbuffers_inc\b", None),
    # MSCCL++: its collective kernels name their op; its executor runs any plan.
    CommKernelRule("mscclpp", r"\bmscclpp::(?:\w+::|\(anonymous namespace\)::)*allreduce", "allreduce"),
    CommKernelRule("mscclpp", r"\bmscclpp::(?:\w+::|\(anonymous namespace\)::)*allgather", "allgather"),
    CommKernelRule("mscclpp", r"\bmscclpp::executionKernel\b", None),
    # NVSHMEM's own kernels (`nvshmemi_reduce_kernel`, `nvshmemi_proxy_rma_entrypoint`, ...).
    CommKernelRule("nvshmem", r"\bnvshmemi?x?_\w*barrier", "barrier"),
    CommKernelRule("nvshmem", r"\bnvshmemi?_reduce", "allreduce"),
    CommKernelRule("nvshmem", r"\bnvshmem", None),
)

# CPU events that are communication by name: gloo's work annotations, c10d's collective operators,
# the functional collectives DTensor and torch.compile issue and wait on (`_c10d_functional::
# all_reduce`, `_c10d_functional::wait_tensor`), the profiler's `record_param_comms` (see
# sql/_activity.sql for the CPU timeline).
CPU_PATTERNS: tuple[str, ...] = (r"^gloo:", r"^c10d::", r"^_?c10d_functional::", r"^record_param_comms$")


def session_variables() -> dict:
    """The rules as the session variables `comm_kernel_match` (sql/macros.sql) reads.

    DuckDB compiles a regular expression once only when it is a constant, and a pattern per rule
    read from a table would be compiled again for every name (1.5 ms a name for these rules). So
    the rules also travel as one expression, `^(?:.*?(?P<rule0>...)|.*?(?P<rule1>...)|...)`: it
    is compiled once, and RE2, like Perl, takes the first alternative that matches anywhere in the
    name, which is the first rule; the one group that captured says which.
    """
    groups = [f"rule{index}" for index in range(len(RULES))]
    return {
        "comm_kernel_rules": [rule._asdict() for rule in RULES],
        "comm_kernel_groups": groups,
        "comm_kernel_regex": "^(?:" + "|".join(f".*?(?P<{g}>{rule.pattern})" for g, rule in zip(groups, RULES)) + ")",
    }
