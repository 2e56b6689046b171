"""What the small CPU trainers (``sft``, ``grpo``) share: loading, LoRA, SFT data, the shared-prefix
forward pass, a metrics log and a plot.

Written to be read. Plain PyTorch and transformers; no peft, no matplotlib (the plot is a
hand-written SVG).

The shared-prefix forward pass (:func:`prefix_shared_logits`) is the main CPU saving: every
tau_env sample starts with the same system prompt and tool schemas (2-2.5k tokens of a 3k-token
Harbor Bank sample), so a micro-batch runs that common prefix once (with gradient: the result is
exact, not an approximation), repeats its key/value cache across the batch, and runs only each
sample's own suffix. ``prefix_grad=False`` (``--no-prefix-grad``) runs the prefix without gradient:
cheaper, and the gradient then leaves out the prefix's encoding (an approximation, said so).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from tau_env.reference_trainers.chat_templates import TEMPLATES
from tau_env.reference_trainers.rollout import FAMILIES, TrajectoryBuilder
from torch import Tensor, nn

from tau_env.error import Error, InvalidOptionError, ResultsFolderError, one_line
from tau_env.messages import clip
from tau_env.sft import initial_tools, sft_example_problem, training_problem

#: The Linear layers LoRA wraps (Llama/Qwen/SmolLM2 names): attention and MLP projections.
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


# --------------------------------------------------------------------------------------- loading


log = logging.getLogger(__name__)

#: What ``--device`` takes: ``auto`` (the GPU when torch sees one, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``.
DEVICE_RE = re.compile(r"auto|cpu|cuda(:\d{1,3})?")


def check_device(device: Any, flag: str = "--device") -> None:
    """``--device`` (or ``flag``): one of the forms :data:`DEVICE_RE` takes (whether that GPU exists is
    asked when a run starts, by :func:`resolve_device`: a config written on one machine may run on another).
    """
    if not (isinstance(device, str) and DEVICE_RE.fullmatch(device)):
        shown = repr(clip(device, 40)) if isinstance(device, str) else f"a value of type {type(device).__name__}"
        raise InvalidOptionError(f"{flag} must be auto, cpu, cuda or cuda:N, not {shown}")


def resolve_device(device: str = "auto", flag: str = "--device") -> torch.device:
    """The torch device of ``--device``: ``auto`` is the first GPU when torch sees one, else the CPU.
    ``flag``: the option's name in errors.

    Raises:
        InvalidOptionError: not a ``--device`` form, or a GPU this machine's torch does not see.
    """
    check_device(device, flag)
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        return torch.device("cpu")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    _, colon, digits = device.partition(":")
    index = int(digits or 0)
    if index >= count:
        seen = f"it sees {count} GPU{'s' if count != 1 else ''}" if count else "it sees no GPU (CPU build or no driver)"
        raise InvalidOptionError(f"{flag} {device}: this machine's torch cannot use it: {seen}; use {flag} cpu.")
    return torch.device("cuda", index) if colon else torch.device("cuda")  # torch refuses "cuda:01" as text


@contextmanager
def matmul_precision(device: torch.device, *, tf32: bool) -> Iterator[None]:
    """For the block's duration, float32 matrix products on a GPU in TF32 (``tf32=True``: as veRL and
    most trainers train, several times the float32 throughput of an H100, 10-bit mantissas in the
    products' inputs) or in full float32; the process's own setting is put back after, so a user's
    process keeps its settings. Nothing changes on a CPU.
    """
    if device.type != "cuda":
        yield
        return
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):  # torch >= 2.9; its legacy flag raises when read after the new one is set
        old: Any = matmul.fp32_precision
        matmul.fp32_precision = "tf32" if tf32 else "ieee"
        try:
            yield
        finally:
            matmul.fp32_precision = old
    else:
        old = matmul.allow_tf32
        matmul.allow_tf32 = tf32
        try:
            yield
        finally:
            matmul.allow_tf32 = old


def load_model(path: str | Path, *, dtype: str = "float32", device: str = "cpu") -> tuple[Any, Any]:
    """A causal LM and its tokenizer from a local Hugging Face folder (no network), on ``device``
    (a ``--device`` form, :func:`resolve_device`).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    if not (path / "config.json").is_file():
        raise InvalidOptionError(f"{path} is not a model folder (no config.json); pass a Hugging Face model folder.")
    try:  # another tool's config.json (a tau-env eval results folder has one) is not a model's
        model_type = json.loads((path / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (ValueError, UnicodeDecodeError, AttributeError, RecursionError):
        model_type = None
    if not model_type:
        raise InvalidOptionError(
            f"{path} is not a model folder (its config.json names no model_type); pass a Hugging Face model folder."
        )
    try:  # transformers' own errors name neither the folder nor the file at fault
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (MemoryError, KeyboardInterrupt, ImportError):  # a missing package is not a damaged folder
        raise
    except Exception as e:
        raise InvalidOptionError(
            f"{path}: its tokenizer does not load ({why(e)}); its tokenizer files (tokenizer.json, "
            "tokenizer_config.json) or config.json are missing or damaged: copy the folder again or pick another."
        ) from e
    target = resolve_device(device)  # before the weights load: a GPU that is not there is said at once
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, dtype=getattr(torch, dtype))
    except (MemoryError, KeyboardInterrupt, ImportError, torch.cuda.OutOfMemoryError):
        raise
    except Exception as e:
        raise InvalidOptionError(
            f"{path}: its weights do not load ({why(e)}); its weight files (model.safetensors) are missing or "
            "damaged: copy the folder again or pick another."
        ) from e
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:  # ids past the embedding: an IndexError at the first prompt that holds one
        raise InvalidOptionError(
            f"{path}: its tokenizer has {len(tokenizer)} tokens but its model embeds only {rows}: the tokenizer and "
            "the weights are two models'; copy the folder again or pick another."
        )
    return model.to(target), tokenizer


def why(e: BaseException) -> str:
    """An exception as one short line: its type and the first line of its message, clipped."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {clip(first, 160)}" if first else type(e).__name__


def tokenizer_family(tokenizer: Any) -> str:
    """``"qwen"``, ``"smollm2"`` or ``"hermes"``: which tool template of the rollout fits the tokenizer."""
    name = str(getattr(tokenizer, "name_or_path", "")).lower()
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    if "qwen" in name:
        return "qwen"
    if "<|im_start|>" in vocab and "<|im_end|>" in vocab:
        return "smollm2"  # ChatML tokenizers without their own tool template (SmolLM2, our tiny test models)
    return "hermes"


def chat_template_for(tokenizer: Any, family: str) -> str:
    """The template the trainers render with: the family's tool template, else the tokenizer's own."""
    template = TEMPLATES.get(family) or getattr(tokenizer, "chat_template", None)
    if not template:
        raise InvalidOptionError(
            f"The tokenizer has no chat template and family {family!r} brings none; use a model with one."
        )
    return template


def set_threads(n: int | None) -> None:
    """Use ``n`` CPU threads for torch (None: torch's default)."""
    if n:
        torch.set_num_threads(n)


# ----------------------------------------------------------------------------------------- LoRA


class LoRALinear(nn.Module):
    """``y = x W^T + b + (alpha / r) * x A^T B^T`` with W frozen and A, B trained (B starts at 0)."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float):
        super().__init__()
        self.base = base
        self.rank, self.alpha = rank, alpha
        self.scale = alpha / rank
        # drawn on the CPU, then put beside the weights: a seed gives the same factors on any device
        a = torch.empty(rank, base.in_features, dtype=base.weight.dtype)
        nn.init.kaiming_uniform_(a, a=math.sqrt(5))
        self.lora_A = nn.Parameter(a.to(base.weight.device))
        b = torch.zeros(base.out_features, rank, dtype=base.weight.dtype, device=base.weight.device)
        self.lora_B = nn.Parameter(b)
        base.weight.requires_grad_(False)
        if base.bias is not None:
            base.bias.requires_grad_(False)

    def forward(self, x: Tensor) -> Tensor:
        return self.base(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scale

    def delta(self) -> Tensor:
        """The weight change ``scale * B A`` (out_features x in_features)."""
        return (self.lora_B @ self.lora_A) * self.scale


_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def lora_names(model: nn.Module, targets: Sequence[str] = LORA_TARGETS, layers: int = 0) -> list[str]:
    """Names of the Linear layers LoRA wraps: those named one of ``targets``, in the last ``layers``
    decoder blocks (``...layers.N...``) when ``layers`` > 0, else in all of them.
    """
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and n.rsplit(".", 1)[-1] in targets]
    if layers > 0:
        index = {n: int(m.group(1)) for n in names if (m := _LAYER.search(n))}
        if not index:
            raise InvalidOptionError(f"lora layers={layers}: no decoder blocks (...layers.N...) in the model")
        top = max(index.values()) + 1
        names = [n for n in names if index.get(n, -1) >= top - layers]
    return names


def add_lora(
    model: nn.Module, rank: int, alpha: float, targets: Sequence[str] = LORA_TARGETS, layers: int = 0
) -> list[nn.Parameter]:
    """Freeze ``model``, wrap its ``targets`` Linear layers in :class:`LoRALinear`; return the trainable parameters.

    ``layers`` > 0 wraps only those of the last ``layers`` decoder blocks: nothing below them needs
    a gradient, so autograd records nothing there and the backward pass stops at the lowest wrapped
    block (on SmolLM2-135M, the top 15 of 30 blocks: ~1.45x faster steps).
    """
    for p in model.parameters():
        p.requires_grad_(False)
    names = lora_names(model, targets, layers)
    if not names:
        raise InvalidOptionError(f"No Linear layer named one of {list(targets)} in {type(model).__name__}.")
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, LoRALinear(getattr(parent, child), rank, alpha))
    return [p for n, p in model.named_parameters() if "lora_" in n]


def lora_modules(model: nn.Module) -> dict[str, LoRALinear]:
    """The LoRA-wrapped layers by module name."""
    return {n: m for n, m in model.named_modules() if isinstance(m, LoRALinear)}


def merged_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """The model's weights with every LoRA delta merged in, under the plain model's parameter names."""
    wrapped = lora_modules(model)
    out: dict[str, Tensor] = {}
    for key, value in model.state_dict().items():
        if ".lora_" in key:
            continue
        module, _, leaf = key.rpartition(".")
        if module.endswith(".base") and module[: -len(".base")] in wrapped:
            owner = module[: -len(".base")]
            if leaf == "weight":
                with matmul_precision(value.device, tf32=False):  # the merge exact, whatever the training used
                    value = value + wrapped[owner].delta().detach()
            key = f"{owner}.{leaf}"
        out[key] = value.detach().to("cpu", copy=True)  # saved from the CPU whatever the model's device
    return out


def unmerge_into(model: nn.Module, lora_state: dict[str, Tensor]) -> None:
    """Load LoRA factors into a freshly wrapped ``model`` whose base weights hold them merged (a
    checkpoint). ``(base + delta) - delta`` is not ``base`` in floating point (a few elements per
    layer are an ulp off, and every resume would move the frozen base further): the elements
    :func:`unmerge_fixups` recorded at the save are put back exactly.
    """
    wrapped = lora_modules(model)
    with torch.no_grad():
        for name, m in wrapped.items():
            m.lora_A.copy_(lora_state[f"{name}.lora_A"])
            m.lora_B.copy_(lora_state[f"{name}.lora_B"])
            with matmul_precision(m.base.weight.device, tf32=False):
                m.base.weight.sub_(m.delta())
            idx, val = lora_state.get(f"{name}.base_fix.idx"), lora_state.get(f"{name}.base_fix.val")
            if idx is not None and val is not None and len(idx):  # a checkpoint of an older version has none
                flat = m.base.weight.view(-1)
                flat[idx.to(flat.device)] = val.to(flat.device, flat.dtype)


def unmerge_fixups(model: nn.Module) -> dict[str, Tensor]:
    """For each LoRA layer, the base weight's elements that merging then unmerging (as a checkpoint is
    saved, then resumed by :func:`unmerge_into`) does not give back exactly, by flat index and value
    (``<module>.base_fix.idx`` / ``.val``): a few per layer, so a resumed run trains the same base.
    """
    out: dict[str, Tensor] = {}
    with torch.no_grad():
        for name, m in lora_modules(model).items():
            base = m.base.weight.detach()
            with matmul_precision(base.device, tf32=False):  # as merged_state_dict and unmerge_into do it
                delta = m.delta().detach()
                back = (base + delta) - delta
            idx = (back != base).view(-1).nonzero().view(-1)
            out[f"{name}.base_fix.idx"] = idx.to("cpu")
            out[f"{name}.base_fix.val"] = base.view(-1)[idx].to("cpu", copy=True)
    return out


def lora_state(model: nn.Module) -> dict[str, Tensor]:
    """The LoRA factors by ``<module>.lora_A`` / ``<module>.lora_B``."""
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items() if ".lora_" in k}


def save_peft_adapter(model: nn.Module, path: str | Path, *, base_model: str = "") -> Path:
    """The model's LoRA factors as a PEFT LoRA adapter folder (``adapter_config.json`` and
    ``adapter_model.safetensors``), which vLLM loads at run time (``/v1/load_lora_adapter``) and
    ``peft.PeftModel.from_pretrained`` reads: ``W' = W + (alpha / r) B A`` on each wrapped layer.

    Args:
        model: A model wrapped by :func:`add_lora` (every layer with the same rank and alpha).
        path: The folder to write (created; its two files replaced).
        base_model: Recorded as ``base_model_name_or_path``.
    """
    from safetensors.torch import save_file

    wrapped = lora_modules(model)
    if not wrapped:
        raise InvalidOptionError("The model has no LoRA layers to save as an adapter (add_lora first).")
    ranks = {(m.rank, float(m.alpha)) for m in wrapped.values()}
    if len(ranks) != 1:
        raise InvalidOptionError(f"LoRA layers of different ranks or alphas: {sorted(ranks)}")
    ((rank, alpha),) = ranks
    tensors = {}
    targets = sorted({n.rsplit(".", 1)[-1] for n in wrapped})
    for name, m in wrapped.items():
        tensors[f"base_model.model.{name}.lora_A.weight"] = m.lora_A.detach().to("cpu", copy=True).contiguous()
        tensors[f"base_model.model.{name}.lora_B.weight"] = m.lora_B.detach().to("cpu", copy=True).contiguous()
    # layers of those kinds left unwrapped (LoRA on the top blocks only) get zero factors: readers
    # that apply an adapter to every layer of a target kind find the same model
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear) and name.rsplit(".", 1)[-1] in targets and name not in wrapped:
            if name.endswith(".base") and name[: -len(".base")] in wrapped:
                continue
            w = m.weight
            tensors[f"base_model.model.{name}.lora_A.weight"] = torch.zeros(rank, m.in_features, dtype=w.dtype)
            tensors[f"base_model.model.{name}.lora_B.weight"] = torch.zeros(m.out_features, rank, dtype=w.dtype)
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": alpha,
        "target_modules": targets,
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "inference_mode": True,
        "base_model_name_or_path": base_model,
    }
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "adapter_model.safetensors"))
    (out / "adapter_config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    return out


# -------------------------------------------------------------------------------------- SFT data


def read_sft_jsonl(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """SFT examples (``tau-env export-sft`` JSONL, or a synthesis run's ``sft/sft.jsonl``).

    A line that is no SFT example (not JSON, a message a chat template cannot render: an unknown
    role, content that is not text, a malformed tool call) stops the run with its file and line; a
    file with no example is refused. A well-formed example that would teach nothing or a broken call
    (:func:`~tau_env.sft.training_problem`: no trained assistant turn, a trained call whose
    arguments are no JSON object) is left out, with a warning that counts them and names the first.
    """
    out = []
    left_out: list[str] = []
    for path in paths:
        p = Path(path)
        if p.is_dir():
            p = p / "sft" / "sft.jsonl" if (p / "sft" / "sft.jsonl").is_file() else p / "sft.jsonl"
        if not p.is_file():
            raise ResultsFolderError(
                f"No SFT data at {p}: pass a `tau-env export-sft --jsonl` file or a synthesis run."
            )
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise ResultsFolderError(f"{p} is not UTF-8 text ({e.reason} at byte {e.start}); pass SFT JSONL.") from None
        found = 0
        for n, line in enumerate(text.split("\n"), 1):  # not splitlines(): U+2028 and U+0085 are text in a line
            if not line.strip():
                continue
            try:
                ex = json.loads(line)
            except (ValueError, RecursionError) as e:  # RecursionError: nested too deeply
                raise ResultsFolderError(f"{p}:{n} is not JSON ({e}); each line is one SFT example.") from None
            problem = sft_example_problem(ex)
            if problem:
                raise ResultsFolderError(
                    f"{p}:{n} is not an SFT example ({problem}; expected messages, tools and train)."
                )
            found += 1
            unusable = training_problem(ex)
            if unusable:
                left_out.append(f"{p}:{n} ({unusable})")
                continue
            out.append(ex)
        if not found:
            raise ResultsFolderError(f"{p} holds no SFT example (it is empty or blank); pass SFT JSONL.")
    if left_out:
        log.warning("left out %d SFT example(s) that train nothing or a broken call: %s", len(left_out), left_out[0])
    if not out and not left_out:
        raise ResultsFolderError("No SFT data given: pass export-sft JSONL files or synthesis run folders.")
    if not out:
        raise ResultsFolderError(f"No SFT example can be trained: {len(left_out)} left out, the first {left_out[0]}.")
    return out


@dataclass
class Sample:
    """One tokenized training sequence: ids and a 0/1 loss mask (1 on the agent's own tokens)."""

    input_ids: list[int]
    loss_mask: list[int]
    task_id: str = ""


def longest_token_chars(tokenizer: Any) -> int:
    """The most characters one token of ``tokenizer`` stands for (its longest vocabulary entry as
    written; a byte-level or byte-fallback entry stands for fewer than it is written with).
    """
    return max((len(t) for t in tokenizer.get_vocab()), default=1) or 1


def surely_longer_than(example: dict[str, Any], max_len: int, token_chars: int) -> bool:
    """Whether ``example`` has more than ``max_len`` tokens for sure, from the characters of its
    text alone: a huge example is left out without tokenizing it, which takes seconds and gigabytes.

    Counted: the non-blank characters of each message's text and tool-call arguments up to its
    last trained turn (what the sample holds; blanks, which a normalizer or template may drop, are
    not). Each token stands for at most ``token_chars`` characters and the template only adds
    tokens; the count must pass twice that bound (Unicode normalization may join a character with
    its accents), so only an example far too long is judged without tokenizing it.
    """
    messages = example.get("messages") or []
    train = example.get("train") or []
    last = max((i for i, t in enumerate(train) if t), default=len(messages) - 1)
    limit, chars = 2 * max_len * token_chars, 0
    for m in messages[: last + 1]:
        if not isinstance(m, dict):
            continue
        texts = [m.get("content")]
        for call in m.get("tool_calls") or ():
            fn = call.get("function") if isinstance(call, dict) else None
            texts.append(fn.get("arguments") if isinstance(fn, dict) else None)
        for text in texts:
            if isinstance(text, str):
                chars += len(text) - sum(map(text.count, (" ", "\t", "\n", "\r")))
        if chars > limit:
            return True
    return False


def tokenize_sft_example(tokenizer: Any, example: dict[str, Any], chat_template: str | None) -> Sample:
    """An SFT example as the rollout would have produced it, token for token.

    The same :class:`~tau_env.reference_trainers.rollout.TrajectoryBuilder` as the rollout: the
    prompt up to the first trained assistant turn, each trained turn's tokens (its text as the
    template renders it, through the end-of-turn token) with mask 1, and what the env added in
    between with mask 0. The greeting and other untrained turns stay in the context with mask 0.
    """
    messages, train = example["messages"], example["train"]
    if len(train) != len(messages):
        raise ResultsFolderError(f"An SFT example has {len(messages)} messages but {len(train)} train flags.")
    turns = [i for i, t in enumerate(train) if t and messages[i].get("role") == "assistant"]
    if not turns:
        raise ResultsFolderError(f"SFT example {example.get('task_id')!r} has no trained assistant turn.")
    b = TrajectoryBuilder(tokenizer, initial_tools(example), chat_template, task_id=str(example.get("task_id", "")))
    b.start(messages[: turns[0]])
    for j, k in enumerate(turns):
        before = b.render(messages[:k], add_generation_prompt=True)
        text = b.render(messages[: k + 1])[len(before) :]
        ids = b.encode(text)
        eot = b.eot_token_id
        if eot is not None and eot in ids:
            ids = ids[: len(ids) - ids[::-1].index(eot)]  # through the end-of-turn token, as generated
        b.add_generated(ids, [0.0] * len(ids), "stop")
        nxt = turns[j + 1] if j + 1 < len(turns) else None
        if nxt is not None:
            b.add_messages(messages[k + 1 : nxt], assistant_message=messages[k])
    t = b.trajectory()
    return Sample(t.input_ids, t.agent_mask, t.task_id)


def turn_prefixes(sample: Sample, n: int) -> list[Sample]:
    """Copies of ``sample`` cut after each of its first ``n`` trained turns (a trained turn: a run
    of mask-1 tokens), but never after its last one (that copy would be the sample): exact
    prefixes of its ids and mask.

    Extra SFT samples for a model's opening decisions: after the shared prompt prefix they are a
    few dozen tokens long, so a pass over them costs a small fraction of a pass over the full
    episodes (the turn that names the procedure is the first, and the hardest for a small model).
    """
    ends, mask = [], sample.loss_mask
    for t in range(1, len(mask) + 1):
        if mask[t - 1] and (t == len(mask) or not mask[t]):
            ends.append(t)
    return [Sample(sample.input_ids[:e], mask[:e], sample.task_id) for e in ends[:-1][:n]]


# ------------------------------------------------------------------------- shared-prefix forward


def common_prefix_len(seqs: Sequence[Sequence[int]]) -> int:
    """How many leading tokens every sequence shares."""
    n = min(len(s) for s in seqs)
    first = seqs[0]
    for i in range(n):
        t = first[i]
        if any(s[i] != t for s in seqs[1:]):
            return i
    return n


def split_point(seqs: Sequence[Sequence[int]], masks: Sequence[Sequence[int]], min_prefix: int = 16) -> int:
    """Where the shared prefix ends: inside the common prefix, before the first trained token's predictor.

    The suffix's first token is never a trained target (its logits would come from the prefix).
    Returns 0 (no sharing) when the common part is shorter than ``min_prefix``.
    """
    p = common_prefix_len(seqs)
    first_trained = min((m.index(1) for m in masks if 1 in m), default=p + 1)
    p = min(p, first_trained - 1, min(len(s) for s in seqs) - 1)
    return p if p >= min_prefix else 0


def prefix_cache(model: nn.Module, prefix: Sequence[int]) -> Any:
    """The key/value cache of ``prefix`` (one sequence), computed without gradient.

    For :func:`prefix_shared_logits` with ``prefix_grad=False``: a training step whose micro-batches
    share the prompt prefix runs it once for the whole step (the weights change only at the step's
    end, so every micro-batch would compute the same keys and values).
    """
    device = next(model.parameters()).device
    with torch.no_grad():
        out = model(input_ids=torch.tensor([list(prefix)], dtype=torch.long, device=device), use_cache=True)
    return getattr(out, "cache", None) or out.past_key_values


def prefix_shared_logits(
    model: nn.Module,
    seqs: Sequence[Sequence[int]],
    prefix_len: int,
    prefix_grad: bool = True,
    *,
    cache: Any = None,
    keep: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Logits over each sequence's suffix ``seq[prefix_len:]``, the shared prefix run once.

    The prefix (``seqs[0][:prefix_len]``, common to all) is run once; its key/value cache is
    repeated across the batch and the right-padded suffixes attend to it. With ``prefix_grad``
    (the default) the prefix runs with gradient: the same logits and gradients as running every
    full sequence. Without it the prefix runs under ``no_grad``: the same logits, but the gradient
    leaves out the path through the prefix's keys and values (the weights' effect on how the
    system prompt is encoded); about half the compute and far less memory per step, since the
    prefix keeps no activations for backward.

    Args:
        cache: The prefix's cache from :func:`prefix_cache` (``prefix_grad=False`` only): not
            recomputed, and left as it was (a copy is extended).
        keep: Suffix positions whose logits to return (a sorted 1-D index tensor), e.g. those that
            predict a trained token: the output layer (576 x 49k for SmolLM2) runs on those alone.

    Returns:
        ``(logits [B, S, V], valid [B, S])`` with ``S`` the longest suffix; ``valid`` is 0 on padding.
        With ``keep``, ``logits`` is ``[B, len(keep), V]`` (``valid`` stays ``[B, S]``).
    """
    device = next(model.parameters()).device
    b = len(seqs)
    suffixes = [list(s[prefix_len:]) for s in seqs]
    width = max(len(s) for s in suffixes)
    pad = 0
    ids = torch.tensor([s + [pad] * (width - len(s)) for s in suffixes], dtype=torch.long, device=device)
    valid = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in suffixes], dtype=torch.long, device=device)
    extra = {} if keep is None else {"logits_to_keep": keep.to(device)}
    if prefix_len == 0:
        return model(input_ids=ids, attention_mask=valid, use_cache=False, **extra).logits, valid
    if cache is not None:
        if prefix_grad:
            raise InvalidOptionError("a precomputed prefix cache carries no gradient: pass prefix_grad=False with it")
        if cache.get_seq_length() != prefix_len:
            raise InvalidOptionError(f"the prefix cache holds {cache.get_seq_length()} tokens, not {prefix_len}")
        import copy

        cache = copy.deepcopy(cache)  # the forward appends the suffix to it
    else:
        prefix = torch.tensor([list(seqs[0][:prefix_len])], dtype=torch.long, device=device)
        with torch.set_grad_enabled(prefix_grad and torch.is_grad_enabled()):
            first = model(input_ids=prefix, use_cache=True)
        cache = getattr(first, "cache", None) or first.past_key_values
    if b > 1:
        cache.batch_repeat_interleave(b)
    attn = torch.cat([torch.ones(b, prefix_len, dtype=torch.long, device=device), valid], dim=1)
    pos = torch.arange(prefix_len, prefix_len + width, device=device).unsqueeze(0).expand(b, -1)
    out = model(
        input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True, **{_cache_arg(model): cache}, **extra
    )
    return out.logits, valid


def predicting_positions(masks: Sequence[Sequence[int]]) -> Tensor:
    """Positions ``t`` (of right-padded rows) whose logits predict a trained token: ``mask[t + 1] == 1`` in some row."""
    width = max(len(m) for m in masks)
    hit = [False] * width
    for m in masks:
        for t in range(len(m) - 1):
            if m[t + 1]:
                hit[t] = True
    return torch.tensor([t for t, h in enumerate(hit) if h], dtype=torch.long)


def compact_targets(logits: Tensor, ids: Tensor, mask: Tensor, keep: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The arguments of ``sft_loss`` / ``token_logprobs`` for logits kept at positions ``keep`` only.

    ``logits`` is ``[B, K, V]`` (position ``keep[j]`` of ``ids [B, S]``); the result is a shorter
    sequence with the same terms: logits ``[B, K + 1, V]`` (a zero row last, which predicts nothing),
    ids and mask ``[B, K + 1]`` whose entry ``j + 1`` is the target ``ids[:, keep[j] + 1]`` (entry 0 is
    padding, mask 0). ``sft_loss`` over it equals ``sft_loss`` over the full rows when every trained
    target is predicted from a kept position.
    """
    b = logits.shape[0]
    nxt = keep.to(ids.device) + 1
    zeros = torch.zeros(b, 1, dtype=ids.dtype, device=ids.device)
    c_logits = torch.cat([logits, logits.new_zeros(b, 1, logits.shape[-1])], dim=1)
    c_ids = torch.cat([zeros, ids[:, nxt]], dim=1)
    c_mask = torch.cat([zeros.to(mask.dtype), mask[:, nxt]], dim=1)
    return c_logits, c_ids, c_mask


def _cache_arg(model: nn.Module) -> str:
    """The forward's name for a key/value cache: ``cache`` (transformers >= 5.2x) or ``past_key_values``."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def pad_rows(rows: Sequence[Sequence[float]], width: int, value: float = 0.0, dtype: Any = torch.float32) -> Tensor:
    """Rows right-padded with ``value`` to ``width`` columns, as a tensor."""
    return torch.tensor([list(r) + [value] * (width - len(r)) for r in rows], dtype=dtype)


# ----------------------------------------------------------------------------------- bookkeeping


def config_dict(config: Any) -> dict[str, Any]:
    """A dataclass config as JSON-ready data (paths as strings)."""
    out = {}
    for f in fields(config):
        v = getattr(config, f.name)
        out[f.name] = str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v
    return out


def content_digest(data: Any) -> str:
    """A short digest of JSON-ready data or of raw bytes (what a run trains on), to tell a rerun on other data."""
    blob = data if isinstance(data, bytes) else json.dumps(data, sort_keys=True, default=str).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]


#: Settings any trainer's resumed run may change: where and how fast it runs (threads, device,
#: micro-batches, the prefix's gradient), how long (more steps continue it), how often it saves.
RESUME_FREE_COMMON = frozenset(
    {
        "out",
        "resume",
        "progress",
        "threads",
        "device",
        "save_every",
        "keep_checkpoints",
        "micro_batch",
        "prefix_grad",
        "steps",
    }
)


class DivergedError(Error, RuntimeError):
    """A training step whose loss or gradient is not finite: the update is not made, nothing is saved."""


def check_finite(trainer: str, step: int, loss: float | None, grad_norm: float, last: Path | None, hint: str) -> None:
    """Stop a run, before its update, at a step whose loss or gradient norm is NaN or infinite: the
    weights are not changed, no checkpoint with non-finite weights is written (the run's latest stays
    the last good one) and the metrics log stays valid JSON.

    Raises:
        DivergedError: naming the step, the values, the checkpoint the run can resume from and ``hint``.
    """
    if (loss is None or math.isfinite(loss)) and math.isfinite(grad_norm):
        return
    where = f"its latest checkpoint is {last}" if last else "it has no checkpoint yet"
    raise DivergedError(
        f"{trainer} step {step}: the loss ({loss}) or gradient norm ({grad_norm}) is not finite; the update was "
        f"not made and nothing was saved ({where}). {hint}"
    )


def check_finite_weights(trainer: str, step: int, params: Iterable[Any], last: Path | None, hint: str) -> None:
    """Stop a run at a step whose update left a trained weight NaN or infinite (a finite gradient
    times a huge learning rate): before it is logged, saved or sent to a rollout server, so the run's
    latest checkpoint stays the last good one.

    Raises:
        DivergedError: naming the step, the checkpoint the run can resume from and ``hint``.
    """
    import torch

    if all(bool(torch.isfinite(p).all()) for p in params):
        return
    where = f"its latest checkpoint is {last}" if last else "it has no checkpoint yet"
    raise DivergedError(
        f"{trainer} step {step}: the update made trained weights non-finite (the loss and gradient were finite); "
        f"nothing of this step was logged or saved ({where}). {hint}"
    )


def check_resume(run_dir: str | Path, saved: dict[str, Any], now: dict[str, Any], free: Iterable[str]) -> None:
    """Refuse to resume the run in ``run_dir`` (its checkpoint's config ``saved``) with the config
    ``now`` when they differ in a setting outside ``free`` (the settings that change only where, how
    fast or how long it runs): the same folder would otherwise continue the old run silently, and
    its checkpoint would carry neither run's settings. A key one of the two lacks (a config of
    another version) is not compared.

    Raises:
        ResultsFolderError: naming each differing setting, its saved value and the one given.
    """
    if not isinstance(saved, dict):
        raise ResultsFolderError(f"{run_dir}: its latest checkpoint's config is not a JSON object; pass another --out.")
    skip = set(free)
    diff = [k for k in saved if k in now and k not in skip and not _same_setting(k, saved[k], now[k])]
    if diff:

        def shown(v: Any) -> str:
            s = json.dumps(v, default=str)
            return s if len(s) <= 80 else s[:77] + "..."

        parts = "; ".join(f"{k.replace('_', '-')}: {shown(saved[k])} there, {shown(now[k])} now" for k in diff)
        model = " (a resume reads no --model: leave it out to continue that run)" if "model" in diff else ""
        raise ResultsFolderError(
            f"{run_dir} holds a run with other settings ({parts}); resuming it would train with neither{model}. "
            "Pass another --out for these settings, the same settings to continue that run, or --no-resume to "
            "delete it and start over there."
        )


#: Settings that name a folder: the same folder spelled another way (``m``, ``m/``, ``./m``, its
#: absolute path) is the same setting.
PATH_SETTINGS = frozenset({"model"})


def _same_setting(key: str, a: Any, b: Any) -> bool:
    if a == b:
        return True
    if key in PATH_SETTINGS and isinstance(a, str) and isinstance(b, str) and a and b:
        return os.path.realpath(a) == os.path.realpath(b)
    return False


def config_from(cls: Any, data: dict[str, Any]) -> Any:
    """A dataclass config from :func:`config_dict`'s data (unknown keys ignored)."""
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


class MetricsLog:
    """Appends one JSON object per step to ``metrics.jsonl`` (a resumed run keeps the earlier lines)."""

    def __init__(self, path: str | Path, resume_step: int = 0, trainer: str | None = None):
        self.path, self.trainer = Path(path), trainer  # the trainer, in every row: whose log it is
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.is_file():  # steps after the checkpoint we resume from will be redone; a torn line goes
            kept = [r for r in self.read(self.path) if r["step"] <= resume_step]
            self.path.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
        self.started = time.perf_counter()

    def log(self, step: int, **values: Any) -> dict[str, Any]:
        row = {"step": step, "time_s": round(time.perf_counter() - self.started, 3), **values}
        if self.trainer:
            row["trainer"] = self.trainer
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        return row

    @staticmethod
    def read(path: str | Path) -> list[dict[str, Any]]:
        """The rows of a run's JSONL log (``metrics.jsonl``, ``rollouts.jsonl``), each an object with a
        step. A last line without its newline is a write a kill cut short: left out. Any other line
        that is not such a row is refused by file and line (the log is not this trainer's, or damaged).
        """
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:  # a run whose log was deleted (or never written): no rows
            return []
        except UnicodeDecodeError as e:
            raise ResultsFolderError(
                f"{path} is not UTF-8 text ({e.reason} at byte {e.start}); pass another --out."
            ) from None
        lines = text.splitlines()
        rows = []
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (ValueError, RecursionError):
                row = None
            if row is None and n == len(lines) and not text.endswith("\n"):
                break  # torn by a kill mid-write
            if not (isinstance(row, dict) and type(row.get("step")) is int):
                raise ResultsFolderError(
                    f"{path}:{n} is not a row of this run's log (a JSON object with a step); the folder is damaged "
                    "or not a trainer's: pass another --out."
                )
            rows.append(row)
        return rows


#: The description every plot of :func:`svg_plot` carries.
PLOT_MARK = "tau_env metrics plot"


def svg_plot(rows: Sequence[dict[str, Any]], keys: Sequence[str], path: str | Path, title: str = "") -> Path:
    """A small line chart of ``keys`` against ``step``, one panel per key, as an SVG file.

    Rows without a finite number for a key are left out of its panel; a step logged twice (a run that
    redid steps) shows its last value; the axes are labelled with the smallest and largest step and
    value plotted (one point sits in the middle). Text is escaped, so any key or title gives valid XML.
    """
    import re
    from xml.sax.saxutils import escape as _escape

    def escape(text: str) -> str:  # characters XML 1.0 has no place for become U+FFFD
        return _escape(re.sub("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]", "\ufffd", text))

    w, h, pad = 360, 160, 36
    panels = []

    def frac(v: float, lo: float, hi: float) -> float:  # halves: a spread of two huge values stays finite
        span = hi / 2 - lo / 2
        return (v / 2 - lo / 2) / span if span > 0 else 0.5

    for i, key in enumerate(keys):
        last: dict[float, float] = {}
        for r in rows:
            v, x = r.get(key), r.get("step")
            if isinstance(v, (int, float)) and isinstance(x, (int, float)) and math.isfinite(float(v)):
                last[float(x)] = float(v)
        pts = sorted(last.items())
        y0 = i * (h + 20) + 20
        box = f'<rect x="{pad}" y="{y0}" width="{w - pad - 8}" height="{h - pad}" fill="none" stroke="#999"/>'
        label = f'<text x="{pad}" y="{y0 - 4}" font-size="12">{escape(str(key))}</text>'
        if not pts:
            panels.append(box + label)
            continue
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        xlo, xhi, ylo, yhi = min(xs), max(xs), min(ys), max(ys)
        scaled = [
            (pad + frac(x, xlo, xhi) * (w - pad - 8), y0 + (h - pad) - frac(y, ylo, yhi) * (h - pad)) for x, y in pts
        ]
        line = " ".join(f"{x:.1f},{y:.1f}" for x, y in scaled)
        step = lambda x: f"{x:g}"  # noqa: E731
        ticks = f'<text x="2" y="{y0 + 10}" font-size="10">{yhi:.3g}</text>' if yhi > ylo else ""
        ticks += f'<text x="2" y="{y0 + h - pad if yhi > ylo else y0 + (h - pad) / 2}" font-size="10">{ylo:.3g}</text>'
        ticks += f'<text x="{pad}" y="{y0 + h - pad + 12}" font-size="10">step {step(xlo)}</text>'
        if xhi > xlo:
            ticks += f'<text x="{w - 60}" y="{y0 + h - pad + 12}" font-size="10">{step(xhi)}</text>'
        dots = "".join(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2"/>' for x, y in scaled) if len(pts) < 60 else ""
        panels.append(box + label + ticks + f'<polyline fill="none" stroke="#1f77b4" points="{line}"/>' + dots)
    height = len(keys) * (h + 20) + 20
    head = f'<text x="{pad}" y="12" font-size="12" font-weight="bold">{escape(title)}</text>' if title else ""
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{height}" font-family="sans-serif">'
        + f"<desc>{PLOT_MARK}</desc>"  # how a trainer knows its own plot in a folder (checkpoint.open_run_dir)
        + head
        + "".join(panels)
        + "</svg>\n"
    )
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(svg, encoding="utf-8")
    return p


def progress_bar(total: int, initial: int, desc: str, enabled: bool = True) -> Any:
    """A tqdm bar on stderr (disabled: a stand-in that does nothing)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, disable=not enabled, dynamic_ncols=True)


# ---------------------------------------------------------------------------------- command line


def opt(default: Any, help: str) -> Any:  # noqa: A002 (the argparse word)
    """A config field with its ``--help`` text."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


def check_number(
    cfg: Any,
    name: str,
    lo: float | None = None,
    hi: float | None = None,
    *,
    above: bool = False,
    below: bool = False,
    integer: bool = False,
) -> None:
    """Raise :class:`~tau_env.error.InvalidOptionError` unless ``cfg.<name>`` is a finite number (an int
    with ``integer``) at least ``lo`` (more than it with ``above``) and at most ``hi`` (less with ``below``).
    The message names the command-line flag.
    """
    value = getattr(cfg, name)
    kinds = (int,) if integer else (int, float)
    ok = isinstance(value, kinds) and not isinstance(value, bool)
    ok = ok and (isinstance(value, int) or math.isfinite(value))  # an int is finite (and may not fit a float)
    ok = ok and (lo is None or (value > lo if above else value >= lo))
    ok = ok and (hi is None or (value < hi if below else value <= hi))
    if not ok:
        parts = [f"{'more than' if above else 'at least'} {lo:g}"] if lo is not None else []
        parts += [f"{'less than' if below else 'at most'} {hi:g}"] if hi is not None else []
        what = "an integer" if integer else "a number"
        raise InvalidOptionError(
            f"--{name.replace('_', '-')} must be {what}{' ' + ' and '.join(parts) if parts else ''}, not {value!r}"
        )


def max_threads() -> int:
    """The most ``--threads`` a trainer takes: 4 per CPU here (many more only slow it down, and
    thousands make BLAS crash the process when it starts them).
    """
    import os

    return 4 * (os.cpu_count() or 1)


def check_family(family: str) -> None:
    """``--family``: empty (from the tokenizer) or one of the rollout's tool templates."""
    if family not in ("", *FAMILIES):
        raise InvalidOptionError(f"--family must be one of {', '.join(FAMILIES)} (or empty), not {family!r}")


def parse_config(cls: Any, argv: Sequence[str] | None, description: str, prog: str | None = None) -> Any:
    """``cls`` (a dataclass config) from command-line flags: one ``--field-name`` per field."""
    import argparse
    import typing

    hints = typing.get_type_hints(cls)
    p = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    for f in fields(cls):
        flag = "--" + f.name.replace("_", "-")
        kind = hints[f.name]
        default = f.default if f.default_factory is MISSING else f.default_factory()  # type: ignore[misc]
        help_text = f.metadata.get("help", "").replace("%", "%%")
        if kind is bool:
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=help_text)
        elif kind is list or typing.get_origin(kind) is list:
            p.add_argument(flag, nargs="*", default=default, help=help_text)
        else:
            base = [a for a in typing.get_args(kind) if a is not type(None)] or [kind]
            p.add_argument(flag, type=base[0], default=default, help=help_text)
    try:
        return cls(**vars(p.parse_args(argv)))
    except InvalidOptionError as e:  # a value out of its range: argparse's usage line and exit status 2
        p.error(str(e))


def run_main(prog: str, fn: Any, resumes: str = "the command without --no-resume resumes from there") -> int:
    """A trainer's command line: ``fn()``'s exit status, or for an error of tau_env's (bad data, a
    folder that is no checkpoint, a run that may not resume) one ``PROG: error: ...`` line on stderr
    and exit status 2, not a traceback; Ctrl-C is one ``PROG: interrupted ...`` line (saying how the
    command ``resumes``) and status 130, SIGTERM the same unwinding (locks released, nothing torn
    beyond what a resume drops) with status 143.
    """
    import signal
    import sys
    import threading

    from tau_env.error import Error

    class Terminated(KeyboardInterrupt):
        """SIGTERM (what a scheduler or ``kill`` sends): unwound as Ctrl-C is, exit status 143."""

    def on_term(signum: int, frame: Any) -> None:
        raise Terminated

    before = None
    if threading.current_thread() is threading.main_thread():
        before = signal.signal(signal.SIGTERM, on_term)
    try:
        return int(fn())
    except Error as e:
        print(f"{prog}: error: {one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        what = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
        print(f"{prog}: {what}; what it saved stays in its --out ({resumes})", file=sys.stderr)
        return 143 if isinstance(e, Terminated) else 130
    finally:
        if before is not None:
            signal.signal(signal.SIGTERM, before)


def trainer_main(cls: Any, train: Any, argv: Sequence[str] | None, doc: str | None, prog: str) -> int:
    """A trainer's ``main``: its config (``cls``) from the flags, ``train(cfg)``, the last checkpoint's
    path logged; errors as :func:`run_main` gives them.
    """
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cfg = parse_config(cls, argv, (doc or "").split("\n\n")[0], prog=prog)

    def run() -> int:
        logging.getLogger(train.__module__).info("checkpoint: %s", train(cfg))
        return 0

    return run_main(prog, run)


def build_tiny_model(path: str | Path, corpus: Sequence[str], *, vocab_size: int = 2000, seed: int = 0) -> Path:
    """A tiny random Llama (2 layers, 32 hidden units) with a byte-level BPE trained on ``corpus``, saved at ``path``.

    For plumbing checks (CI, ``--quick`` runs): offline, seconds, ChatML specials and the SmolLM2 tool template.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = TEMPLATES["smollm2"]
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=16384,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=True,
    )
    path = Path(path)
    LlamaForCausalLM(config).save_pretrained(str(path))
    fast.save_pretrained(str(path))
    return path
