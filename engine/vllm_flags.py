"""`vllm serve` engine flags read as tokensim options: `tokensim run --vllm-args "vllm serve MODEL --flags"`,
and vLLM's spellings given straight on the command line (--enable-prefix-caching, --kv-cache-dtype fp8_e4m3).

Flags that are the same option under another name are spellings in the option table (engine.options:
--max-num-seqs, --max-num-batched-tokens), or renamed here (-tp). The others differ in shape: a switch
for an on/off choice, another unit (GiB), other value names (fp8_e4m3), a JSON object. A flag tokensim
cannot model is never dropped silently: it comes back as a one-line note naming it. Stdlib only.
"""

from __future__ import annotations

import json
import shlex

from engine.errors import InputError

GIB_GB = 1.073741824  # --kv-offloading-size is in GiB (vLLM's CacheConfig); tokensim's --kv-offload-gb in GB
# vLLM's spellings of the same option: passed on as tokensim's name.
SAME = {"-tp": "--tp", "--tensor-parallel-size": "--tp", "--max-num-seqs": "--max-batch",
        "--max-num-batched-tokens": "--max-batched-tokens", "--gpu-memory-utilization": "--gpu-memory-utilization",
        "--max-model-len": "--max-model-len", "--model": "--model", "--data-parallel-size": "--ep", "-dp": "--ep",
        "--pipeline-parallel-size": "--pp", "-pp": "--pp"}
SWITCHES = {"--enable-prefix-caching": ["--prefix-caching", "on"], "--no-enable-prefix-caching": ["--prefix-caching",
            "off"], "--enable-chunked-prefill": ["--scheduler", "chunked"],
            "--no-enable-chunked-prefill": ["--scheduler", "continuous"],
            # Experts split across the data-parallel ranks: what --ep (--data-parallel-size) already prices.
            "--enable-expert-parallel": []}
_DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "half": "fp16", "fp16": "fp16", "fp8": "fp8",
           "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}
_DRAFTS = {"ngram": "ngram", "mtp": "mtp", "deepseek_mtp": "mtp", "qwen3_next_mtp": "mtp"}
VALUED = ("--kv-cache-dtype", "--dtype", "--block-size", "--kv-offloading-size", "--speculative-config")
# What starts a vLLM flag tokensim reads itself, so a command line given straight can be rewritten.
OWN = ("-tp", "--tensor-parallel-size", *SWITCHES, *VALUED[:1], *VALUED[2:])


def translate(words: list[str]) -> tuple[list[str], list[str]]:
    """vLLM engine words -> (tokensim words, notes). A leading `vllm serve MODEL` is read as --model MODEL."""
    words = list(words[2:] if words[:2] == ["vllm", "serve"] else words)
    out: list[str] = []
    notes: list[str] = []
    if words and not words[0].startswith("-"):
        out += ["--model", words.pop(0)]
    while words:
        flag, _, inline = words.pop(0).partition("=")
        takes = flag in SAME or flag in VALUED or (flag not in SWITCHES and words and not words[0].startswith("-"))
        value = inline or (words.pop(0) if takes and words and not inline else "")
        if flag in SWITCHES:
            out += SWITCHES[flag]
        elif flag in SAME:
            out += [SAME[flag], value]
        elif flag in VALUED:
            out += _valued(flag, value, notes)
        else:
            notes.append(f"vLLM's {flag}{' ' + value if value else ''} is not modelled by tokensim: ignored")
    return out, notes


def _valued(flag: str, value: str, notes: list[str]) -> list[str]:
    """One vLLM flag whose value tokensim reads another way."""
    if flag in ("--kv-cache-dtype", "--dtype"):
        if value == "auto":
            return []  # the model's own dtype, tokensim's default too
        if value not in _DTYPES:
            notes.append(f"vLLM's {flag} {value} is not modelled by tokensim: ignored")
            return []
        return ["--kv-dtype" if flag == "--kv-cache-dtype" else "--dtype", _DTYPES[value]]
    if flag == "--block-size":
        if value != "16":
            notes.append(f"vLLM's --block-size {value}: tokensim's KV blocks are 16 tokens; simulated with 16")
        return []
    if flag == "--kv-offloading-size":
        try:
            gib = float(value)
        except ValueError:
            raise InputError(f"--kv-offloading-size takes GiB, a number, got {value!r}") from None
        return ["--kv-offload-gb", f"{gib * GIB_GB:g}"]
    return _speculative(value, notes)


def _speculative(text: str, notes: list[str]) -> list[str]:
    """--speculative-config '{"method": "ngram", "num_speculative_tokens": 3}' -> --spec-tokens, --spec-draft."""
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"--speculative-config must be a JSON object: {e.msg} at column {e.colno}") from None
    if not isinstance(cfg, dict) or "num_speculative_tokens" not in cfg:
        raise InputError("--speculative-config must be a JSON object with num_speculative_tokens")
    method = str(cfg.get("method", "draft_model" if cfg.get("model") else "ngram"))
    draft = _DRAFTS.get(method) or (str(cfg["model"]) if cfg.get("model") else None)
    for key in sorted(set(cfg) - {"method", "num_speculative_tokens", "model"}):
        notes.append(f"vLLM's --speculative-config {key} is not modelled by tokensim: ignored")
    if draft is None:
        notes.append(f"vLLM's speculative method {method} is not modelled by tokensim: drafted as mtp")
    return ["--spec-tokens", str(cfg["num_speculative_tokens"]), "--spec-draft", draft or "mtp"]


HELP = ("the engine part of a `vllm serve` command line, read as tokensim's options (a flag tokensim cannot model"
        " is named in a note); tokensim's own flags after it win")
EPILOG = ("vLLM's names work too: -tp/--tensor-parallel-size, --max-num-seqs, --max-num-batched-tokens,"
          " --gpu-memory-utilization, --max-model-len, --kv-cache-dtype, --block-size, --enable-prefix-caching,"
          " --no-enable-prefix-caching, --enable-chunked-prefill, --kv-offloading-size (GiB),"
          " --speculative-config JSON")


def expand(argv: list[str]) -> tuple[list[str], list[str]]:
    """A tokensim command line with vLLM's words in it -> tokensim's words only, and the notes: `--vllm-args TEXT`
    is the engine part of a `vllm serve` command line; vLLM-only flags given straight are read the same way."""
    out: list[str] = []
    notes: list[str] = []
    i = 0
    while i < len(argv):
        word, _, inline = argv[i].partition("=")
        if word == "--vllm-args":
            text = inline if inline else (argv[i + 1] if i + 1 < len(argv) else "")
            i += 1 if inline else 2
            got, said = translate(shlex.split(text))
            out += got  # in its place: a tokensim flag after it wins (argparse keeps the last)
            notes += said
            continue
        if word in OWN:
            n = 1 if word in SWITCHES or inline else 2
            got, said = translate(argv[i:i + n])
            out += got
            notes += said
            i += n
            continue
        out.append(argv[i])
        i += 1
    return out, notes
