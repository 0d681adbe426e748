"""Loading target and draft models and their tokenizers, once per process.

A model path is one of:

* ``builtin:NAME``  - a model shipped in ``speedbench/fixtures/models/NAME`` (no hub needed);
* ``finetuned:NAME`` - a fine-tuned copy of a shipped model, built once by ``speedbench fixtures
  finetune`` into the cache (``speedbench/fixtures/finetune.py``);
* ``random:PRESET`` - a Llama built from a preset config with a fixed seed, with a byte-level
  tokenizer (for tests and for a first run before trained weights exist);
* a local directory or a hub id - ``from_pretrained`` (the hub is reached only when the
  user names a hub id and the machine can reach it).

``trust_remote_code`` is passed through and is off by default.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

FIXTURES_DIR = Path(__file__).parent / "fixtures" / "models"

RANDOM_PRESETS: dict[str, dict[str, Any]] = {
    # head_dim 64 everywhere: vLLM's CPU attention rejects small head sizes
    "tiny-target": dict(hidden_size=256, intermediate_size=704, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2),
    "tiny-draft": dict(hidden_size=128, intermediate_size=352, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1),
    # Llama-3.1-8B's layer shapes (byte vocabulary, so not its LM head): verification cost on a GPU without a download
    "llama-3.1-8b-layers": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                                num_key_value_heads=8),
}
BYTE_SPECIALS = ("<|bos|>", "<|eos|>", "<|pad|>")


def random_preset(path: str) -> str | None:
    """The preset of a ``random:PRESET`` name, None for any other path; an unknown preset raises
    ``ValueError`` naming the known ones. The one place that reads the ``random:`` prefix."""
    if not path.startswith("random:"):
        return None
    preset = path.split(":", 1)[1]
    if preset not in RANDOM_PRESETS:
        raise ValueError(f"unknown random preset {preset!r}; known: {sorted(RANDOM_PRESETS)}")
    return preset


def random_config(preset: str) -> dict[str, Any]:
    """The config of a ``random:`` preset's model, without building it (byte-level vocabulary)."""
    return {"vocab_size": 256 + len(BYTE_SPECIALS), "max_position_embeddings": 4096, "tie_word_embeddings": True,
            **RANDOM_PRESETS[preset]}


def finetuned_dir(name: str) -> Path:
    """The folder of a ``finetuned:NAME`` model (built by ``speedbench fixtures finetune``) in the cache."""
    return cache_dir() / "finetuned" / name


def finetuned_source(path: str) -> str | None:
    """The model a ``finetuned:NAME`` model was fine-tuned from (its ``finetune.json``), None for any other path
    or when the folder is not here."""
    if not path.startswith("finetuned:"):
        return None
    try:
        return json.loads((finetuned_dir(path.split(":", 1)[1]) / "finetune.json").read_text(encoding="utf-8"))["source"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def resolve_path(path: str) -> str:
    if path.startswith("finetuned:"):
        local = finetuned_dir(path.split(":", 1)[1])
        if not (local / "config.json").is_file():
            raise FileNotFoundError(f"{path!r} is not built yet (no {local}): run `speedbench fixtures finetune` "
                                    "first (about two minutes)")
        return str(local)
    if path.startswith("builtin:"):
        local = FIXTURES_DIR / path.split(":", 1)[1]
        if not local.is_dir():
            known = sorted(p.name for p in FIXTURES_DIR.glob("*") if p.is_dir()) if FIXTURES_DIR.is_dir() else []
            raise FileNotFoundError(f"no shipped model {path!r} (looked in {local}); shipped: {known}")
        return str(local)
    return path


def byte_tokenizer():
    """A byte-level tokenizer (256 byte tokens + specials) built in code: no files, no hub."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    for tok in BYTE_SPECIALS:
        vocab[tok] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|eos|>", pad_token="<|pad|>"
    )


def _random_model(preset: str, seed: int = 0, device: str = "cpu"):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**random_config(random_preset(f"random:{preset}")))
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        if device == "cpu":
            return LlamaForCausalLM(config)
        # initialised on the accelerator: an 8B-shaped random model takes minutes to initialise on a CPU
        # (the weights then differ from a CPU initialisation: another generator)
        torch.cuda.manual_seed_all(seed) if torch.cuda.is_available() else None
        with torch.device(device):
            return LlamaForCausalLM(config)


DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@lru_cache(maxsize=8)
def load_model(path: str, dtype: str = "float32", device: str = "cpu", revision: str | None = None, trust_remote_code: bool = False):
    """An eval-mode causal LM on ``device``; cached so a sweep loads each model once."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    preset = random_preset(path)
    if preset is not None:
        model = _random_model(preset, device=str(device) if str(device).startswith("cuda") else "cpu")
    else:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(
            resolve_path(path), dtype=DTYPES[dtype], revision=revision, trust_remote_code=trust_remote_code
        )
    return model.to(device=device, dtype=DTYPES[dtype]).eval()


@lru_cache(maxsize=8)
def load_tokenizer(path: str, revision: str | None = None, trust_remote_code: bool = False):
    if random_preset(path) is not None:
        return byte_tokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_path(path), revision=revision, trust_remote_code=trust_remote_code)


def pick_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"backend.device={name!r} but CUDA is not available")
    return name


# ---- model paths as folders on disk -------------------------------------------------------
# For engines that load ``from_pretrained``-style folders (vLLM, servers): ``random:PRESET``
# models exist only in code; :func:`local_dir` writes one (weights + tokenizer, seeded, so every
# export is the same model) into a cache folder once and returns the folder. ``builtin:NAME``
# resolves to the shipped folder; anything else is returned unchanged.


def cache_dir() -> Path:
    root = os.environ.get("SPEEDBENCH_CACHE") or Path.home() / ".cache" / "speedbench"
    return Path(root)


def export(path: str, out_dir: str | Path) -> Path:
    """Save the model and tokenizer named by ``path`` into ``out_dir`` (fp32 weights)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    load_model(path).save_pretrained(out)
    load_tokenizer(path).save_pretrained(out)
    return out


def _fingerprint(preset: str) -> str:
    """Changes when the preset or the libraries that initialise its weights change."""
    import hashlib
    import json

    import torch
    import transformers

    text = json.dumps([RANDOM_PRESETS[preset], torch.__version__, transformers.__version__], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def local_dir(path: str) -> str:
    """A folder an engine can load for ``path``; ``random:`` presets are exported once into the cache."""
    if path.startswith("builtin:"):
        return resolve_path(path)
    preset = random_preset(path)
    if preset is None:
        return path
    target = cache_dir() / "random" / f"{preset}-{_fingerprint(preset)}"
    if (target / "config.json").exists():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{preset}-", dir=target.parent))
    try:
        export(path, tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process won the race; its copy is the same model
            if not (target / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(target)


def model_config(path: str) -> dict[str, Any] | None:
    """vocab_size / num_hidden_layers / max_position_embeddings of a model; None when only a hub id
    (not checked: reading it would need the network). Raises ``FileNotFoundError`` / ``ValueError``."""
    preset = random_preset(path)
    if preset is not None:
        return random_config(preset)
    local = Path(resolve_path(path)).expanduser()
    if not local.exists():
        if path.startswith(("/", ".", "~")) or path.count("/") != 1:
            raise FileNotFoundError(f"{path!r} is neither a folder nor a hub id (owner/name)")
        return None
    cfg_path = local / "config.json"
    try:
        data = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {cfg_path}: {exc}") from exc
    text = data.get("text_config") if isinstance(data.get("text_config"), dict) else {}
    return {**data, **text}


def check_weights(path: str) -> None:
    """Raise ``ValueError`` naming the file when a local model folder holds a ``*.safetensors`` file
    that is not whole (a half-finished copy, a truncated download): the header and the extent of
    every tensor are read (``safetensors.safe_open``), no tensor is. ``random:`` presets, hub ids
    and folders without safetensors files pass (nothing to read without loading)."""
    if random_preset(path) is not None:
        return
    local = Path(resolve_path(path)).expanduser()
    if not local.is_dir():
        return
    from safetensors import safe_open

    for file in sorted(local.glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt"):
                pass
        except Exception as exc:  # noqa: BLE001 - SafetensorError, OSError: the file cannot be loaded
            raise ValueError(f"{file}: not a whole safetensors file ({exc}); copy or download it again") from exc
