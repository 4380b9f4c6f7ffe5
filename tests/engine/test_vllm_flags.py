"""vLLM's engine flags read as tokensim's options (engine.vllm_flags): what maps, what is converted, and that a
flag tokensim cannot model is named in a note, never dropped silently."""

from __future__ import annotations

import pytest

from engine.errors import InputError
from engine.vllm_flags import expand, translate


def test_a_vllm_serve_line_becomes_tokensim_options() -> None:
    words, notes = translate(["vllm", "serve", "qwen2.5-7b", "--tensor-parallel-size", "4", "--kv-cache-dtype=fp8_e5m2",
                              "--no-enable-prefix-caching", "--max-num-batched-tokens", "2048", "--dtype", "auto",
                              "--enable-chunked-prefill", "--gpu-memory-utilization", "0.85"])
    assert words == ["--model", "qwen2.5-7b", "--tp", "4", "--kv-dtype", "fp8", "--prefix-caching", "off",
                     "--max-batched-tokens", "2048", "--scheduler", "chunked", "--gpu-memory-utilization", "0.85"]
    assert notes == []


def test_what_tokensim_cannot_model_is_named_once_each() -> None:
    words, notes = translate(["--block-size", "128", "--swap-space", "4", "--enforce-eager", "--max-model-len", "8192"])
    assert words == ["--max-model-len", "8192"]
    assert notes == ["vLLM's --block-size 128: tokensim's KV blocks are 16 tokens; simulated with 16",
                     "vLLM's --swap-space 4 is not modelled by tokensim: ignored",
                     "vLLM's --enforce-eager is not modelled by tokensim: ignored"]
    assert translate(["--block-size", "16"]) == ([], [])


def test_offload_size_is_converted_from_gib_and_speculation_from_json() -> None:
    words, notes = translate(["--kv-offloading-size", "10", "--speculative-config",
                              '{"method": "deepseek_mtp", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 1}'])
    assert words == ["--kv-offload-gb", "10.7374", "--spec-tokens", "2", "--spec-draft", "mtp"]
    assert notes == ["vLLM's --speculative-config draft_tensor_parallel_size is not modelled by tokensim: ignored"]
    with pytest.raises(InputError, match="num_speculative_tokens"):
        translate(["--speculative-config", '{"method": "ngram"}'])


def test_vllm_args_expand_in_place_so_later_tokensim_flags_win() -> None:
    argv, notes = expand(["run", "--tp", "8", "--vllm-args", "vllm serve generic-14b -tp 2 --max-num-seqs 32",
                          "--max-batch", "16", "--enable-prefix-caching"])
    assert argv == ["run", "--tp", "8", "--model", "generic-14b", "--tp", "2", "--max-batch", "32", "--max-batch", "16",
                    "--prefix-caching", "on"]
    assert notes == []


def test_pipeline_and_dp_attention_with_tp_read_as_vllm_spells_them() -> None:
    from engine.vllm_flags import translate

    words, notes = translate(["vllm", "serve", "m", "--pipeline-parallel-size", "2", "-tp", "4", "-dp", "2",
                              "--enable-expert-parallel", "-pp", "3"])
    assert words == ["--model", "m", "--pp", "2", "--tp", "4", "--ep", "2", "--pp", "3"] and notes == []
