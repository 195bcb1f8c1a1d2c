"""The kernel-table loader on tiny hand-written tables: GPU names map to presets, times are
recovered from the published rates, and every left-out row carries its reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.compute import kernel_tables as kt


def _write(root: Path, relative: str, text: str) -> None:
    path = root / "kernels" / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize("text, preset", [
    ("NVIDIA H800 SXM5", "h100-sxm"), ("sm_90", "h100-sxm"), ("H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H100 PCIe", ""), ("NVIDIA GH200 SXM", "gh200"), ("H200 141GB", "h200"),
    ("NVIDIA GB200", "gb200"), ("sm_100_B200", "b200"), ("A100-SXM4-80GB", "a100-80gb"),
    ("A100-SXM4-40GB", "a100-40gb"), ("gfx942", "mi300x"), ("gfx950", "mi355x"),
    ("NVIDIA B300 SXM", "b300"), ("Intel Gaudi 3", "")])
def test_gpu_names_map_to_presets(text, preset):
    assert kt.gpu_preset(text) == preset


def test_attention_flops_follow_the_cost_model_convention():
    fwd = kt.attention_flops("fwd", batch=2, heads=16, seq_len=1024, head_dim_qk=128,
                             causal=False)
    assert fwd == 4 * 2 * 16 * 1024 ** 2 * 128
    assert kt.attention_flops("fwd", batch=2, heads=16, seq_len=1024, head_dim_qk=128,
                              causal=True) == fwd / 2
    assert kt.attention_flops("fwd+bwd", batch=2, heads=16, seq_len=1024, head_dim_qk=128,
                              causal=False) == 3.5 * fwd
    # DeepSeek's d_qk 192, d_vo 128: the two matmuls' widths add.
    assert kt.attention_flops("bwd", batch=1, heads=1, seq_len=10, head_dim_qk=192,
                              head_dim_vo=128, causal=False) == 2.5 * 2 * 100 * 320
    with pytest.raises(ConfigError, match="pass: unknown pass 'both'"):
        kt.attention_flops("both", batch=1, heads=1, seq_len=1, head_dim_qk=1, causal=False)


@pytest.fixture
def gemm_tables(tmp_path: Path) -> Path:
    _write(tmp_path, "xla_matmul_perf_table/xla_matmul_perf_table.csv",
           "device_key,b,m,n,k,dtype,flops_per_s\n"
           "sm_90,2,1024,2048,4096,bf16xbf16->bf16,5e14\n"
           "sm_90,1,1024,1024,1024,f8e4m3fnxf8e4m3fn->bf16,2.4e15\n"
           "gfx90a,1,256,256,256,bf16xbf16->bf16,1e13\n"
           "sm_100_B200,1,256,256,256,f32xf32->f32,1e13\n")
    _write(tmp_path, "mamf_finder/mamf_best.csv",
           "accelerator,dtype,mamf_tflops,M,N,K\n"
           "NVIDIA B200 SXM,fp8_e4m3fn,3000,1000,2000,3000\n"
           "AMD MI325X,bf16,785,1,1,1\n")
    _write(tmp_path, "azure_ai_benchmarking_guide/gemm_blaslt.csv",
           "gpu,library,dtype,m,n,k,tflops\nH200 141GB (ND H200 v5),CuBLASLt,FP8,8192,8192,8192,"
           "1000\n")
    _write(tmp_path, "github_thread_gemm_tables/gemm_thread_tables.csv",
           "gpu,M,N,K,groups,implementation,tflops\n"
           "H100 80GB HBM3,64,2112,7168,,torch-bf16,100\n"
           "H100 80GB HBM3,64,2112,7168,,w8a8-block-fp8-triton,100\n"
           "NVIDIA H100,65536,1536,2048,128,cublas-loop,300\n")
    _write(tmp_path, "deepgemm_h800/deepgemm_readme_h800_fp8.csv",
           "commit,kernel,m_per_group,n,k,tflops\n"
           "55ab91f72f76,normal_gemm,4096,7168,16384,1426\n"
           "a6d97a1c1b48,normal_gemm,4096,7168,16384,1358\n"
           "55ab91f72f76,m_grouped_masked,4096,7168,2048,1200\n")
    _write(tmp_path, "deepgemm_h800/deepgemm_pr_tables_fp8.csv", "source,tflops\nPR#74,999\n")
    return tmp_path


def test_gemm_rows_become_records_with_their_measured_seconds(gemm_tables):
    records, skipped = kt.load_gemms(gemm_tables)
    by_source = {(r.source, r.gpu, r.dtype): r for r in records}
    assert len(records) == 5
    xla = by_source[("xla_matmul_perf_table", "h100-sxm", "bf16")]
    assert (xla.b, xla.m, xla.n, xla.k) == (2, 1024, 2048, 4096)
    assert xla.time_s == pytest.approx(2 * 2 * 1024 * 2048 * 4096 / 5e14)
    mamf = by_source[("mamf_finder", "b200", "fp8")]
    assert mamf.time_s == pytest.approx(2 * 1000 * 2000 * 3000 / 3000e12)
    assert by_source[("azure_ai_benchmarking_guide", "h200", "fp8")].kernel == "cublaslt"
    assert by_source[("github_thread_gemm_tables", "h100-sxm", "bf16")].m == 64
    deepgemm = by_source[("deepgemm_h800", "h100-sxm", "fp8")]
    assert deepgemm.time_s == pytest.approx(2 * 4096 * 7168 * 16384 / 1426e12)
    reasons = " | ".join(s.reason for s in skipped)
    for expected in ("H100 FP8 rows flagged", "no GPU preset for gfx90a", "f32xf32->f32",
                     "MI325X", "block-scaled FP8", "grouped GEMM", "superseded",
                     "grouped MoE GEMM", "before-after"):
        assert expected in reasons
    assert len(skipped) == 9  # every one of the 14 rows is a record or a reason


def test_attention_rows_recover_seconds_and_sum_both_cudnn_passes(tmp_path):
    _write(tmp_path, "flash_attention/flash_attention_figures_transcribed.csv",
           "gpu,pass,causal,head_dim,seqlen,batch,nheads,implementation,tflops\n"
           "H100 80GB SXM5,fwd+bwd,yes,128,2048,8,16,FlashAttention-2,300\n"
           "H100 80GB SXM5,fwd,no,64,512,32,32,Triton,100\n"
           "H100 80GB SXM5,fwd,no,64,512,32,32,cuDNN,\n")
    header = ("backend,data_type,attn_mask,batch_size,q_seqlen,kv_seqlen,num_q_heads,"
              "head_dim_qk,head_dim_vo,profile_pass,fwd_time_ms,bwd_time_ms,time_ms,"
              "sliding_window_size,success,gpu_name\n")
    _write(tmp_path, "cudnn_frontend_sdpa_norms/sdpa/a.csv", header
           + "cudnn,bfloat16,no_mask,1,4096,4096,64,128,128,both,2.0,5.0,,,True,NVIDIA H200\n"
           + "cudnn,fp8,no_mask,1,4096,4096,64,128,128,both,1.0,3.0,,,True,NVIDIA H200\n"
           + "cudnn,bfloat16,no_mask,1,4096,4096,64,128,128,fwd,,,1.0,,True,NVIDIA L40S\n"
           + "cudnn,bfloat16,top_left,1,4096,4096,64,64,64,both,1,1,,1024,True,NVIDIA H200\n"
           + "cudnn,bfloat16,top_left,1,4096,4096,64,192,128,both,inf,inf,,,False,\n")
    _write(tmp_path, "azure_ai_benchmarking_guide/flash_attention2.csv", "gpu,tflops\nx,1\n")
    records, skipped = kt.load_attention(tmp_path)
    fa2 = next(r for r in records if r.kernel == "fa2")
    assert fa2.gpu == "h100-sxm" and fa2.causal and fa2.pass_ == "fwd+bwd"
    assert fa2.time_s == pytest.approx(3.5 * 4 * 8 * 16 * 2048 ** 2 * 128 / 2 / 300e12)
    cudnn = {r.pass_: r for r in records if r.kernel == "cudnn"}
    assert set(cudnn) == {"fwd", "bwd", "fwd+bwd"}
    assert cudnn["fwd+bwd"].time_s == pytest.approx(7e-3)
    assert cudnn["fwd+bwd"].flops == pytest.approx(3.5 * cudnn["fwd"].flops)
    assert len(records) == 4 and len(skipped) == 7


def test_memory_rows_count_the_bytes_each_benchmark_moves(tmp_path):
    _write(tmp_path, "azure_ai_benchmarking_guide/hbm_babelstream.csv",
           "gpu,kernel,tb_per_s\nH100 80GB HBM3 (ND H100 v5),Triad,2.97\n"
           "L40S (ND L40S v1),Copy,0.8\n")
    _write(tmp_path, "cudnn_frontend_sdpa_norms/norms/h200.csv",
           "norm_type,backend,fwd_time_ms,bwd_time_ms,fwd_gbps,bwd_gbps,success,gpu_name\n"
           "rms_norm,cudnn,0.1,0.2,3700,3800,True,NVIDIA H200\n")
    _write(tmp_path, "liger_kernel/liger_speed_datacenter_gpus.csv",
           "kernel_name,kernel_provider,kernel_operation_mode,x_name,x_value,y_value_50,"
           "extra_benchmark_config_str,gpu_name\n"
           'rms_norm,liger,forward,H,4096,0.02,"{""M"": 2048, ""dtype"": ""torch.bfloat16""}",'
           "NVIDIA A100-SXM4-80GB\n"
           'megatron_swiglu,liger,forward,ffn_local,1024,0.05,"{""S"": 2048, ""B"": 4}",'
           "NVIDIA H100 80GB HBM3\n"
           'rms_norm,huggingface,forward,H,4096,0.05,"{""M"": 2048}",NVIDIA A100-SXM4-80GB\n')
    records, skipped = kt.load_memory(tmp_path)
    by_op = {r.op: r for r in records}
    triad = by_op["babelstream.triad"]
    assert triad.bytes_moved / triad.time_s == pytest.approx(2.97e12)
    assert triad.bytes_moved == 3 * 8 * 2 ** 25
    assert by_op["rms_norm.cudnn.bwd"].bytes_moved == pytest.approx(3800e9 * 0.2e-3)
    assert by_op["rms_norm.fwd"].bytes_moved == 2048 * 4096 * 2 * 2
    assert by_op["megatron_swiglu.fwd"].bytes_moved == 2048 * 4 * 1024 * 2 * 3
    assert len(records) == 5 and len(skipped) == 2
