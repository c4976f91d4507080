"""Communication kernels that are not NCCL, recognised by default from their real names.

Every name below is a kernel's name as Kineto prints it (demangled, with template arguments and
parameters), built from the `__global__` declaration, namespace and template parameters in the
library's public source; the comment above each group says which repository and file. Argument
lists are shortened where the source has dozens; the rules do not read them.
"""

from __future__ import annotations

import pytest

from conftest import ingest_directly
from pipelines.settings import load
from pipelines.warehouse.store import Warehouse
from synthetic import Kernel, Rank, write_run

# (name, op, family) for each family.
FAMILIES: dict[str, list[tuple[str, str | None]]] = {
    "deepep": [
        # deepseek-ai/DeepEP csrc/kernels/intranode.cu (v1; namespace deep_ep::intranode)
        ("void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int, int const*, int*, int, int, int const*, int*, int*, int, int, int, void**, int**, int)", "alltoall"),
        ("void deep_ep::intranode::cached_notify_dispatch<8>(int const*, int, void**, int**, int)", "alltoall"),
        ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*, int*, int4 const*, float const*, long const*, float const*, bool const*, int const*, int, int, int, int, int, int, int, void**, int, int, int)", "alltoall"),
        ("void deep_ep::intranode::cached_notify_combine<8>(void**, int*, int, int, int**, int)", "alltoall"),
        ("void deep_ep::intranode::combine<__nv_bfloat16, 8, 768, 4096>(__nv_bfloat16*, float*, __nv_bfloat16 const*, float const*, __nv_bfloat16 const*, __nv_bfloat16 const*, int const*, int const*, int const*, int, int, int, void**, int, int, int)", "alltoall"),
        ("void deep_ep::intranode::barrier<8>(int**, int)", "barrier"),
        # deepseek-ai/DeepEP csrc/kernels/internode.cu (v1; namespace deep_ep::internode)
        ("void deep_ep::internode::notify_dispatch<false, 4>(int const*, int*, int, int const*, int*, int, bool const*, int*, int, int, int, int*, int*, int*, int*, void*, int, int, void**, int, int**, int, int, int, bool)", "alltoall"),
        ("void deep_ep::internode::dispatch<false, 4, false, 16384, 7, 2>(int4*, float*, long*, float*, void*, int*, int4 const*, float const*, long const*, float const*, int*, int*, int*, int*, int, int, int, int, int, bool const*, void*, int, int, void**, int, int, int)", "alltoall"),
        ("void deep_ep::internode::cached_notify(int, int, int, int, int, int, int*, int, int*, int, int*, int*, int*, void*, int, void**, int, int**, int, int, int, bool)", None),
        ("void deep_ep::internode::combine<__nv_bfloat16, false, 4, 10, 16384, 4, 2>(int4*, float*, bool const*, int4 const*, float const*, int const*, int const*, void const*, int const*, int const*, int const*, int, int, int, int, void*, int, int, void**, int, int, int)", "alltoall"),
        # deepseek-ai/DeepEP csrc/kernels/internode_ll.cu (v1; namespace deep_ep::internode_ll)
        ("void deep_ep::internode_ll::dispatch<true, false, 7168>(void*, float*, int*, long*, int*, int*, int*, float*, void*, int*, void*, int*, void*, void const*, long const*, int*, int*, int, int, int, int, int, int, int, int, bool, int, int*)", "alltoall"),
        ("void deep_ep::internode_ll::combine<false, 7168, 9>(void*, void*, int*, void const*, long const*, float const*, int const*, long const*, int*, int*, int*, int, int, int, int, int, int, int, int, int, int, int, bool)", "alltoall"),
        ("void deep_ep::internode_ll::clean_low_latency_buffer<128>(int*, int, int*, int, int*, int*)", None),
        # deepseek-ai/DeepEP csrc/kernels/legacy/intranode.cu (EPv2 tree; namespace deep_ep::legacy::intranode)
        ("void deep_ep::legacy::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*, int*, int4 const*, float const*, long const*, float const*, bool const*, int const*, int, int, int, int, int, int, int, void**, int, int, int)", "alltoall"),
        # deepseek-ai/DeepEP deep_ep/include/deep_ep/impls/{dispatch,hybrid_combine,barrier,pp_send_recv}.cuh
        # (EPv2, JIT; namespace deep_ep::elastic)
        ("void deep_ep::elastic::dispatch_impl<false, false, 24, 2, 8, 8, 7168, 0, 4096, 256, 8, 128, 1, 100000000000>(void*, void*, long*, float*, long*, int*, int*, int*, int*, int*, int, int, int, ncclDevComm, ncclWindow*, void*, void*, void*, int)", "alltoall"),
        ("void deep_ep::elastic::hybrid_combine_impl<false, 24, 2, 4, 2, 8, 7168, 4096, 256, 8, 128, 100000000000>(void*, float*, void*, float*, int*, int, ncclDevComm, ncclWindow*, void*, void*, int, int)", "alltoall"),
        ("void deep_ep::elastic::barrier_impl<32, 8, 100000000000>(ncclDevComm, ncclWindow*, void*, int)", "barrier"),
        ("void deep_ep::elastic::pp_send_impl(ncclDevComm, ncclWindow*, void*, long, int, int)", "send"),
        ("void deep_ep::elastic::pp_recv_impl(ncclDevComm, ncclWindow*, void*, long, int, int)", "recv"),
        # uccl-project/uccl ep/src/internode_ll.cu, ep/src/intranode.cu (a DeepEP fork: namespace uccl::...)
        ("void uccl::internode_ll::dispatch<true, false, 7168>(void*, float*, int*, long*, int*, int*, int*, float*, void*, int*, void*, int*, void*, void const*, long const*, int*, int*, int, int, int, int, int, int, int, int, bool, void**, int)", "alltoall"),
        ("void uccl::intranode::cached_notify_combine<8>(void**, int*, int, int, int**, int)", "alltoall"),
    ],
    "pplx": [
        # ppl-ai/pplx-kernels csrc/all_to_all/intranode_dispatch.cu, internode_dispatch.cu (anonymous
        # namespace), internode_combine.cu (global namespace), intranode_combine.cu (anonymous)
        ("void (anonymous namespace)::dispatchKernel<10u, true, true>(int*, unsigned long, unsigned long, std::byte const*, unsigned long, unsigned long, float const*, unsigned long, unsigned long, unsigned int const*, unsigned long, unsigned long, unsigned long, unsigned long, unsigned long, unsigned long, unsigned long, unsigned long, unsigned long, std::byte*)", "alltoall"),
        ("void combineKernel<__nv_bfloat16, __nv_bfloat16, 16ul, true, false>(__nv_bfloat16*, unsigned long, unsigned long, __nv_bfloat16 const*, unsigned long, unsigned long, unsigned int const*, unsigned long, float const*, unsigned long, unsigned long, unsigned long, unsigned long, unsigned long, unsigned long, unsigned long, std::byte*, std::byte*, unsigned long*, unsigned long*)", "alltoall"),
        ("void (anonymous namespace)::combineKernel<__nv_bfloat16, __nv_bfloat16, 16ul, false, true>(__nv_bfloat16*, unsigned long, __nv_bfloat16 const*, unsigned long, unsigned int const*, float const*, unsigned long, unsigned long, unsigned long, unsigned long, unsigned long, std::byte**, unsigned long*, unsigned long)", "alltoall"),
    ],
    "mori": [
        # ROCm/mori src/ops/dispatch_combine/intranode.hpp (namespace mori::moe)
        ("void mori::moe::EpDispatchIntraNodeKernel<__hip_bfloat16, false>(mori::moe::EpDispatchCombineArgs<__hip_bfloat16>)", "alltoall"),
        ("void mori::moe::EpCombineIntraNodeKernel<__hip_bfloat16>(mori::moe::EpDispatchCombineArgs<__hip_bfloat16>)", "alltoall"),
    ],
    "trtllm": [
        # NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/communicationKernels/allReduceFusionKernels.cu
        # (namespace tensorrt_llm::kernels::ar_fusion) and moeAllReduceFusionKernels.cu (::ar_fusion::moe)
        ("void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<(tensorrt_llm::kernels::ar_fusion::AllReduceFusionPattern)1, __nv_bfloat16, 8, true, true>(tensorrt_llm::kernels::ar_fusion::AllReduceFusionParams)", "allreduce"),
        ("void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_twoshot_sync<(tensorrt_llm::kernels::ar_fusion::AllReduceFusionPattern)0, __nv_bfloat16, 4, false>(tensorrt_llm::kernels::ar_fusion::AllReduceFusionParams, std::array<int, 4>)", "allreduce"),
        ("void tensorrt_llm::kernels::ar_fusion::moe::moereduce_allreduce_fusion_kernel_oneshot_lamport<__nv_bfloat16, 8>(tensorrt_llm::kernels::ar_fusion::moe::MoeReductionAllReduceFusionParams)", "allreduce"),
        # MoE all-to-all (communicationKernels/moeAlltoAllKernels.cu, namespace
        # tensorrt_llm::kernels::moe_alltoall; as vendored in flashinfer-ai/flashinfer csrc/nv_internal/)
        ("void tensorrt_llm::kernels::moe_alltoall::moeA2ADispatchKernel<__nv_bfloat16, 8, 1>(int const*, int const*, tensorrt_llm::kernels::moe_alltoall::DispatchKernelPointers, int, int, int, int, int, int)", "alltoall"),
        ("void tensorrt_llm::kernels::moe_alltoall::moeA2ACombineKernel<__nv_bfloat16, 8, 1>(tensorrt_llm::kernels::moe_alltoall::CombineKernelPointers, int, int, int, int, int, int)", "alltoall"),
        ("void tensorrt_llm::kernels::moe_alltoall::moeA2APrepareDispatchKernel(int*, int*, int, int*, int)", "alltoall"),
        ("void tensorrt_llm::kernels::helixAllToAllKernel<__nv_bfloat16>(tensorrt_llm::kernels::HelixAllToAllParams)", "alltoall"),
    ],
    "flashinfer": [
        # flashinfer-ai/flashinfer include/flashinfer/comm/trtllm_allreduce.cuh (namespace flashinfer::trtllm_allreduce)
        ("void flashinfer::trtllm_allreduce::oneShotAllReduceKernel<__nv_bfloat16, 8, true, false>(flashinfer::trtllm_allreduce::AllReduceParams<__nv_bfloat16>)", "allreduce"),
        ("void flashinfer::trtllm_allreduce::twoShotAllReduceKernel<__nv_bfloat16, 8, false, false, false>(flashinfer::trtllm_allreduce::AllReduceParams<__nv_bfloat16>)", "allreduce"),
        ("void flashinfer::trtllm_allreduce::reduce_fusion::lamport_style_one_shot_all_reduce_norm_kernel<__nv_bfloat16, 8, true, true, true, true, true>(flashinfer::trtllm_allreduce::AllReduceParams<__nv_bfloat16>)", "allreduce"),
        # include/flashinfer/comm/trtllm_allreduce_fusion.cuh, trtllm_moe_allreduce_fusion.cuh, trtllm_mnnvl_allreduce.cuh
        ("void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<(flashinfer::trtllm_allreduce_fusion::AllReduceFusionPattern)1, __nv_bfloat16, 8, true, true>(flashinfer::trtllm_allreduce_fusion::AllReduceFusionParams<__nv_bfloat16>)", "allreduce"),
        ("void flashinfer::trtllm_moe_allreduce_fusion::moefinalize_allreduce_fusion_kernel_oneshot_lamport<__nv_bfloat16, 8, true>(flashinfer::trtllm_moe_allreduce_fusion::MoeFinalizeAllReduceFusionParams<__nv_bfloat16>)", "allreduce"),
        ("void flashinfer::trtllm_mnnvl_allreduce::twoshotAllreduceKernel<8, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16 const*, __nv_bfloat16**, __nv_bfloat16*, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int*, bool)", "allreduce"),
        # include/flashinfer/comm/trtllm_alltoall.cuh (MNNVL MoE all-to-all), mixed_comm.cuh, ulysses_all_to_all.cuh
        ("void flashinfer::trtllm_alltoall::moeAllToAllKernel<__nv_bfloat16>(flashinfer::trtllm_alltoall::MoeEpWorldInfo, flashinfer::trtllm_alltoall::SendRecvDataInfo, flashinfer::trtllm_alltoall::SendRecvDispls, flashinfer::trtllm_alltoall::SendRecvDispls)", "alltoall"),
        ("void flashinfer::mixed_comm::allgather_kernel<__nv_bfloat16, 8>(flashinfer::mixed_comm::MixedCommParams)", "allgather"),
        ("void flashinfer::mixed_comm::reducescatter_kernel<__nv_bfloat16, 8>(flashinfer::mixed_comm::MixedCommParams)", "reducescatter"),
        ("void flashinfer::comm::ulysses::ulysses_a2a_kernel<__nv_bfloat16, 8>(flashinfer::comm::ulysses::UlyssesParams)", "alltoall"),
    ],
    "custom_allreduce": [
        # vllm-project/vllm csrc/custom_all_reduce.cuh; sgl-project/sglang sgl-kernel/csrc/allreduce/
        # custom_all_reduce.cuh (adapted from vLLM, same namespace vllm)
        ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)", "allreduce"),
        ("void vllm::cross_device_reduce_2stage<float, 4>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, float*, int, int)", "allreduce"),
        # vllm-project/vllm csrc/quickreduce/quick_reduce.h (namespace quickreduce; sglang's quick_all_reduce.cuh too)
        ("void quickreduce::allreduce_prototype_twoshot<quickreduce::AllReduceTwoshot<__hip_bfloat16, quickreduce::CodecQ4<__hip_bfloat16>, false>, __hip_bfloat16>(__hip_bfloat16 const*, __hip_bfloat16*, unsigned int, unsigned int, int, unsigned char**, unsigned int, unsigned int, long)", "allreduce"),
    ],
    "symm_mem": [
        # pytorch/pytorch torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu (static kernels
        # in an anonymous namespace; two_shot with reduce_scatter=true serves reduce_scatter_out)
        ("void (anonymous namespace)::one_shot_all_reduce_kernel<c10::BFloat16, 16, 8>(c10::BFloat16**, c10::BFloat16*, c10::BFloat16*, unsigned long, unsigned long, unsigned int**, unsigned long, unsigned long)", "allreduce"),
        ("void (anonymous namespace)::two_shot_all_reduce_kernel<float, 16, 8, false, false>(float**, float*, unsigned long, unsigned long, unsigned int**, unsigned long, unsigned long, unsigned long)", "allreduce"),
        ("void (anonymous namespace)::two_shot_all_reduce_kernel_inplace<c10::BFloat16, 16, 4>(c10::BFloat16**, unsigned long, unsigned long, unsigned int**, unsigned long, unsigned long)", "allreduce"),
        ("void (anonymous namespace)::two_shot_all_reduce_kernel<c10::BFloat16, 16, 8, true, false>(c10::BFloat16**, c10::BFloat16*, unsigned long, unsigned long, unsigned int**, unsigned long, unsigned long, unsigned long)", "reducescatter"),
        ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long, unsigned int**, unsigned long, unsigned long)", "allreduce"),
        ("void (anonymous namespace)::multimem_one_shot_all_reduce_kernel<float, 16>(float*, float*, unsigned long, unsigned int**, unsigned long, unsigned long)", "allreduce"),
        ("void (anonymous namespace)::multimem_all_gather_kernel<16>(char*, char*, unsigned long, unsigned int**, unsigned long, unsigned long)", "allgather"),
        # torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemory.cu (namespace c10d::symmetric_memory)
        ("c10d::symmetric_memory::barrier_kernel(unsigned int**, int, int, int, unsigned long)", "barrier"),
        ("c10d::symmetric_memory::put_signal_kernel(unsigned int**, int, int, int, int, unsigned long)", None),
        # torch/csrc/distributed/c10d/symm_mem/nvshmem_extension.cu (namespace c10d::nvshmem_extension)
        ("c10d::nvshmem_extension::allToAllV(void*, void*, long*, unsigned long, int, int)", "alltoall"),
        ("c10d::nvshmem_extension::exchangeSplitAndOffset(long*, long*, int, int)", "alltoall"),
    ],
    "userbuffers": [
        # NVIDIA/TransformerEngine transformer_engine/common/comm_gemm_overlap/userbuffers/userbuffers.cu
        ("void userbuffers_fp16_sum_inplace_gpu_rw<8>(int, int, int, int, int, int, int, void**, int, unsigned long)", "allreduce"),
        ("void userbuffers_fp16_sum_inplace_gpu_mc<4>(int, int, int, int, int, int, int, void**, int, float4*, unsigned long)", "allreduce"),
        ("void userbuffers_fp16_sum_inplace_gpu_rr_rs<8>(int, int, int, int, int, int, int, void**, int, unsigned long)", "reducescatter"),
        ("void userbuffers_fp16_sum_inplace_gpu_rr_rs_oop_fp8<__nv_fp8_e4m3, 8>(int, int, int, int, int, int, int, void**, void*, float*, int, int, int, unsigned long)", "reducescatter"),
        ("void userbuffers_fp16_sum_inplace_gpu_rw_ag<8>(int, int, int, int, int, int, int, void**, int, unsigned long)", "allgather"),
        ("kuserbuffers_pushsendrecv(int*, int*, int4*, int4*, int4*, int4*, int, int*, int*, int, int, unsigned long)", "sendrecv"),
        ("kuserbuffers_pushsend(int*, int*, int4*, int4*, int)", "send"),
        ("kuserbuffers_pullrecv(int, int, int, int*, int*, int4*, int4*, int, unsigned long)", "recv"),
    ],
    "msccl": [
        # microsoft/msccl src/include/collectives.h (NCCL_KERN_NAME with NCCL_ALGO_MSCCL)
        ("ncclKernel_AllReduce_MSCCL_LL_Sum_half(ncclDevComm*, ncclWorkElem)", "allreduce"),
        # ROCm/rccl src/include/msccl/msccl_kernel.h (MSCCL_KERNEL_ENTRY_NAME: mscclKernel_<redop>_<type>_<proto>_<fullOps>)
        ("mscclKernel_Sum_bfloat16_LL128_false(ncclDevComm*, mscclAlgo*, mscclWork*)", None),
    ],
    "mscclpp": [
        # microsoft/mscclpp src/ext/collectives/allreduce/allreduce_rsag.cu, allgather/allgather_fullmesh.cu,
        # src/core/include/execution_kernel.hpp (namespace mscclpp)
        ("void mscclpp::collective::allreduceRsAg<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, mscclpp::DeviceHandle<mscclpp::BaseMemoryChannel>*, mscclpp::DeviceHandle<mscclpp::SwitchChannel>*, unsigned long, int, int, int, unsigned long, unsigned int)", "allreduce"),
        ("void mscclpp::collective::(anonymous namespace)::allgatherFullmesh<false>(void*, void*, void*, mscclpp::DeviceHandle<mscclpp::MemoryChannel>*, unsigned long, unsigned long, unsigned long, unsigned long)", "allgather"),
        ("void mscclpp::executionKernel<__nv_bfloat16, false>(int, __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, unsigned long, unsigned long, mscclpp::DeviceExecutionPlan*, unsigned long, unsigned int, unsigned int)", None),
    ],
    "nvshmem": [
        # NVIDIA/nvshmem src/host/coll/... (team split reduce), src/host/proxy/... (on-stream RMA, quiet)
        ("void nvshmemi_reduce_kernel<int, (rdxn_ops)4>(int, int, int, int*, int const*, unsigned long, nvshmemi_team*)", "allreduce"),
        ("void nvshmemi_proxy_rma_entrypoint<(nvshmemi_op_t)0, 1>(void*, void*, rma_bytesdesc_t, int)", None),
        ("nvshmemi_proxy_quiet_entrypoint()", None),
    ],
    "nccl": [
        # NVIDIA/nccl src/device/symmetric/generate.py (NCCL 2.27+: ncclSymkDevKernel_<coll>_<algo>_<red>_<ty>)
        ("ncclSymkDevKernel_AllReduce_RSxLD_AGxST_sum_f32(ncclSymkDevWorkArgs4K)", "allreduce"),
        ("ncclSymkDevKernel_AllGather_ST(ncclSymkDevWorkArgs4K)", "allgather"),
        # ROCm/rccl src/device/common.cu (RCCL keeps NCCL's names)
        ("ncclDevKernel_Generic(ncclDevComm*, channelMasks, ncclWork*)", None),
    ],
}

# Compute kernels whose names share words with communication (dispatch, combine, reduce, all_reduce,
# namespaces of communication libraries): none is communication.
COMPUTE = [
    # pytorch/pytorch aten/src/ATen/native/cuda/Reduce.cuh, CUDALoops.cuh
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4>)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
    # NVIDIA/cccl cub/device/dispatch/dispatch_reduce.cuh (the file is named dispatch; the kernel is a reduction)
    "void cub::CUB_200200_900_NS::DeviceReduceSingleTileKernel<cub::CUB_200200_900_NS::DeviceReducePolicy<float, int, cuda::std::plus<void> >::Policy600, float const*, float*, int, cuda::std::plus<void>, float, float>(float const*, float*, int, cuda::std::plus<void>, float)",
    # cuBLAS / CUTLASS GEMMs as they appear in traces
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8::Params)",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    # TorchInductor's generated Triton kernels (pointwise, reduction)
    "triton_poi_fused_add_0",
    "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_1",
    # deepseek-ai/DeepEP csrc/kernels/layout.cu: computes the dispatch layout locally
    "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int, int, int)",
    # deepseek-ai/DeepEP deep_ep/include/deep_ep/impls/dispatch_copy_epilogue.cuh: copies received tokens locally
    "void deep_ep::elastic::dispatch_copy_epilogue_impl<false, 24, 2, 8, 7168, 0, 4096, 256, 8>(void*, void*, int*, int*, int*, int*, void*, int, int)",
    # flashinfer-ai/flashinfer include/flashinfer/comm/trtllm_allreduce.cuh: an RMSNorm in a communication namespace
    "void flashinfer::trtllm_allreduce::reduce_fusion::rms_norm_kernel<__nv_bfloat16, true, true, true, false>(flashinfer::trtllm_allreduce::AllReduceParams<__nv_bfloat16>)",
    # flashinfer-ai/flashinfer include/flashinfer/comm/trtllm_allreduce.cuh: fills a local buffer
    "void flashinfer::trtllm_allreduce::lamport_initialize_kernel<__nv_bfloat16>(__nv_bfloat16*, unsigned long)",
    # vllm-project/vllm csrc/moe/moe_align_sum_kernels.cu, topk_softmax_kernels.cu
    "void vllm::moe::moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, int, int, unsigned long, int*, int)",
    "void vllm::moe::topkGatingSoftmax<4, 64, 4, 16, 32, int>(float const*, bool const*, float*, int, int*, int*, int, int, int)",
    # NVIDIA/TransformerEngine transformer_engine/common/permutation/permutation.cu (MoE permute, local)
    "void moe_permute_kernel<__nv_bfloat16, float, 128, 4>(__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, float const*, float*, int const*, int, int, int, int)",
    "void moe_unpermute_kernel<__nv_bfloat16, float, true>(__nv_bfloat16 const*, __nv_bfloat16*, int const*, float const*, int, int, int)",
]

ALL_NAMES = [name for names in FAMILIES.values() for name, _ in names] + COMPUTE


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory):
    """Every name above as a kernel without collective metadata, one after another, ingested with default settings."""
    folder = tmp_path_factory.mktemp("catalogue")
    kernels = [Kernel(10 + 20 * index, 10, name) for index, name in enumerate(ALL_NAMES)]
    run = write_run(folder / "run", [Rank(0, "host-a", [(1, 0, 20 * len(ALL_NAMES) + 20)], kernels)], 1)
    store = Warehouse(folder / "warehouse")
    store.ensure()
    ingest_directly(store, run, "catalogue")
    con = store.connect()
    try:
        found = con.execute(
            "SELECT kernel, op, kernel_family, metadata_source, bytes, size_unknown_reason FROM collectives"
        ).fetchall()
    finally:
        con.close()
    return {kernel: rest for kernel, *rest in found}


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_is_recognised_with_its_op(catalogue, family):
    for name, op in FAMILIES[family]:
        assert name in catalogue, f"{family}: {name} is not communication"
        found_op, found_family, source, size, reason = catalogue[name]
        assert (found_op, found_family) == (op, family), name
        assert source == "kernel name" and size is None
        assert reason == f"no collective metadata: the name of a {family} kernel does not say its size"


def test_compute_kernels_with_similar_names_are_not_communication(catalogue):
    assert [name for name in COMPUTE if name in catalogue] == []
    assert len(catalogue) == len(ALL_NAMES) - len(COMPUTE)


DISPATCH = "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*, int*, int4 const*, float const*, long const*, float const*, bool const*, int const*, int, int, int, int, int, int, int, void**, int, int, int)"
COMBINE = "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768, 4096>(__nv_bfloat16*, float*, __nv_bfloat16 const*, float const*, __nv_bfloat16 const*, __nv_bfloat16 const*, int const*, int const*, int const*, int, int, int, void**, int, int, int)"
GROUPED_GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8::Params)"


def expert_parallel_run(folder):
    """Two ranks on one host, two steps each: dispatch, the experts' GEMM, combine, with no NCCL at all.

    Per step (us): dispatch 100-160, GEMM 200-500, combine 520-600; rank 1's dispatch starts 20 us
    later. So each step has 140 (rank 1: 120) us of communication, none of it under compute.
    """
    ranks = []
    for rank, late in ((0, 0), (1, 20)):
        kernels = []
        for base in (0, 1000):
            kernels += [
                Kernel(base + 100 + late, 60 - late, DISPATCH, stream=20),
                Kernel(base + 200, 300, GROUPED_GEMM),
                Kernel(base + 520, 80, COMBINE, stream=20),
            ]
        ranks.append(Rank(rank, "host-a", [(1, 0, 1000), (2, 1000, 1000)], kernels))
    return write_run(folder, ranks, 2)


def test_expert_parallel_traffic_is_found_with_default_settings(tmp_path):
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    ingest_directly(store, expert_parallel_run(tmp_path / "run"), "ep", overrides={"link_gbps": 400})
    con = store.connect()
    try:
        collectives = con.execute(
            "SELECT rank, step, op, kernel_family, bytes, size_unknown_reason, dur_ns FROM collectives ORDER BY rank, start_ns"
        ).fetchall()
        breakdown = con.execute("SELECT rank, step, comm_ns, exposed_comm_ns FROM step_breakdown ORDER BY rank, step").fetchall()
        bandwidth = con.execute(
            "SELECT count(*), count(algbw_gbps), count(busbw_gbps), count(utilization) FROM collective_bw"
        ).fetchall()
        buckets = con.execute("SELECT count(*) FROM gradient_buckets").fetchall()
    finally:
        con.close()
    reason = "no collective metadata: the name of a deepep kernel does not say its size"
    assert collectives == [
        (rank, step, "alltoall", "deepep", None, reason, dur)
        for rank, late in ((0, 0), (1, 20))
        for step in (1, 2)
        for dur in ((60 - late) * 1000, 80_000)
    ]
    assert breakdown == [(0, 1, 140_000, 140_000), (0, 2, 140_000, 140_000), (1, 1, 120_000, 120_000), (1, 2, 120_000, 120_000)]
    # Matched across ranks (transfer and wait still come out), but no bandwidth is made up without a size.
    assert bandwidth == [(8, 0, 0, 0)]
    # The what-if replays gradient buckets with sizes only: these kernels give it none to invent.
    assert buckets == [(0,)]


def test_user_patterns_still_add_a_family_of_their_own(tmp_path):
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    (store.root / "wirespeed.toml").write_text('[communication]\npatterns = ["^my_a2a_kernel"]\n')
    run = write_run(tmp_path / "run", [Rank(0, "host-a", [(1, 0, 1000)], [Kernel(100, 50, "my_a2a_kernel(float*)"), Kernel(200, 50, DISPATCH)])], 1)
    ingest_directly(store, run, "user", settings=load(store.root))
    con = store.connect()
    try:
        assert con.execute("SELECT kernel_family, op FROM collectives ORDER BY start_ns").fetchall() == [
            ("user pattern", None),
            ("deepep", "alltoall"),
        ]
    finally:
        con.close()
