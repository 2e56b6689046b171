"""An in-process backend on ``transformers`` for small local models: no server needed.

``TransformersClient`` has the same ``complete`` as :class:`~tau_env.llm.ChatClient`, so
:class:`~tau_env.llm.LLMAgent` and :class:`~tau_env.llm.LLMUser` run on it unchanged. It renders
the conversation and tool schemas with the model's chat template, generates on the CPU (in a
worker thread, one generation at a time), and returns the text; tool calls the model prints in
the hermes format (``<tool_call>{...}</tool_call>``) are parsed by the policy. Needs the ``embed``
extra (torch and transformers).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from tau_env.error import DependencyNotInstalled, InvalidOptionError
from tau_env.llm.client import Sampling, Usage


def growing_cache(config: Any) -> Any:
    """A ``transformers.DynamicCache`` whose full-attention layers grow in place (:func:`_growing_layer`).

    transformers' own layers append every generated token with ``torch.cat``, copying the whole
    cache: at a 3k-token context that was a third of SmolLM2-135M's decode time on a 2-core CPU.
    Sliding-window layers (and any other kind) are left as they are.
    """
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    cache = DynamicCache(config=config)
    cls = _growing_layer()
    cache.layers = [cls() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


_GROWING: Any = None


def _growing_layer() -> Any:
    """``DynamicLayer`` over a buffer with spare room: ``update`` writes the new tokens into it and
    returns a view (no copy of what is cached), reallocating (25 % more room) only when full.
    Anything that replaces the tensors (``batch_repeat_interleave``, ``reset``...) is picked up at
    the next ``update``; ``crop`` keeps a view of the same buffer.
    """
    global _GROWING
    if _GROWING is None:
        from transformers.cache_utils import DynamicLayer

        class GrowingLayer(DynamicLayer):
            def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
                if not self.is_initialized:
                    self.lazy_initialization(key_states, value_states)
                n = self.keys.shape[-2] if self.keys.numel() else 0
                k = key_states.shape[-2]
                buf = getattr(self, "_buf", None)
                if (
                    buf is None
                    or buf[0].shape[:-2] != key_states.shape[:-2]
                    or buf[0].shape[-1] != key_states.shape[-1]
                    or buf[0].shape[-2] < n + k
                    or buf[0].dtype != key_states.dtype
                    or (
                        n and (self.keys.data_ptr() != buf[0].data_ptr() or self.values.data_ptr() != buf[1].data_ptr())
                    )
                ):
                    room = n + k + max(256, (n + k) // 4)
                    shape = (*key_states.shape[:-2], room, key_states.shape[-1])
                    buf = (key_states.new_empty(shape), value_states.new_empty(shape))
                    if n:
                        buf[0][..., :n, :] = self.keys
                        buf[1][..., :n, :] = self.values
                    self._buf = buf
                buf[0][..., n : n + k, :] = key_states
                buf[1][..., n : n + k, :] = value_states
                self.keys, self.values = buf[0][..., : n + k, :], buf[1][..., : n + k, :]
                return self.keys, self.values

        _GROWING = GrowingLayer
    return _GROWING


class ReusedPrefixModel:
    """A causal LM whose ``generate`` reuses the key/value cache of earlier generations.

    Every tau_env prompt of a run starts with the same system prompt and tool schemas, and each
    agent turn's prompt extends the previous turn's sequence: recomputing those thousands of tokens
    per turn dominates generation on a CPU. This wrapper keeps the caches of the last ``slots``
    generations with their token ids; a new prompt resumes from the one sharing its longest token
    prefix (cropped to it), so only the new tokens are run. Other attributes are the model's.

    Outputs equal plain ``generate``'s up to floating-point rounding (cached keys and values are
    computed incrementally). Batch size 1 only (other calls go to the plain ``generate``). Call
    :meth:`clear` after the weights change (a training step).
    """

    def __init__(self, model: Any, slots: int = 4, min_reuse: int = 16):
        import inspect

        self.model = model
        self.slots, self.min_reuse = slots, min_reuse
        self._entries: list[tuple[list[int], Any]] = []  # (token ids the cache holds, cache), newest last
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self.reused_tokens = self.computed_tokens = 0

    def __getattr__(self, name: str) -> Any:  # everything else is the model's
        return getattr(self.__dict__["model"], name)

    def eval(self) -> ReusedPrefixModel:
        self.model.eval()
        return self

    def train(self, mode: bool = True) -> ReusedPrefixModel:
        self.model.train(mode)
        return self

    def clear(self) -> None:
        """Forget every cache (after the weights change)."""
        self._entries.clear()

    def generate(self, input_ids: Any = None, attention_mask: Any = None, **kwargs: Any) -> Any:
        if input_ids is None or input_ids.shape[0] != 1 or self._cache_kw in kwargs:
            return self.model.generate(input_ids, attention_mask=attention_mask, **kwargs)
        ids = input_ids[0].tolist()
        best, best_len = None, 0
        for i, (held, _) in enumerate(self._entries):
            n = 0
            for a, b in zip(held, ids):
                if a != b:
                    break
                n += 1
            if n > best_len:
                best, best_len = i, n
        keep = min(best_len, len(ids) - 1)
        if best is not None and keep >= self.min_reuse:
            _, cache = self._entries.pop(best)
            extra = cache.get_seq_length() - keep
            if extra > 0:
                cache.crop(-extra)  # a negative count removes that many tokens (every transformers version)
        else:
            cache, keep = growing_cache(self.model.config), 0
        self.reused_tokens += keep
        self.computed_tokens += len(ids) - keep
        out = self.model.generate(input_ids, attention_mask=attention_mask, **{self._cache_kw: cache}, **kwargs)
        sequences = out.sequences if hasattr(out, "sequences") else out
        held = sequences[0].tolist()[: cache.get_seq_length()]
        self._entries.append((held, cache))
        del self._entries[: -self.slots]
        return out


class TransformersClient:
    """Chat completions from a local causal LM.

    Args:
        model: A model folder (or a loaded ``PreTrainedModel``).
        tokenizer: A tokenizer with a chat template; loaded from ``model`` when it is a folder.
        sampling: Temperature (0 is greedy) and the per-turn token cap.
        reuse_prefix: Resume each generation from the key/value cache of an earlier one sharing its
            prompt's start (:class:`ReusedPrefixModel`): the shared system prompt and the episode so
            far are not recomputed every turn.
    """

    def __init__(
        self,
        model: str | Path | Any,
        tokenizer: Any = None,
        *,
        sampling: Sampling | None = None,
        reuse_prefix: bool = False,
    ):
        try:
            import torch
            import transformers
        except ImportError as e:
            raise DependencyNotInstalled(
                "The local backend needs torch and transformers: pip install 'tau-env[embed]'."
            ) from e
        self._torch = torch
        if isinstance(model, (str, Path)):
            self.name = str(model)
            tokenizer = tokenizer or transformers.AutoTokenizer.from_pretrained(str(model), local_files_only=True)
            model = transformers.AutoModelForCausalLM.from_pretrained(str(model), local_files_only=True)
        else:
            self.name = getattr(getattr(model, "config", None), "name_or_path", type(model).__name__)
        if tokenizer is None:
            raise InvalidOptionError(
                f"A loaded model ({type(model).__name__}) needs its tokenizer: pass tokenizer=..., or pass the "
                "model's folder instead."
            )
        self.model = model.eval()
        self._device = getattr(model, "device", None)  # a model a caller put on a GPU gets its inputs there
        if reuse_prefix and not isinstance(self.model, ReusedPrefixModel):
            self.model = ReusedPrefixModel(self.model)
        self.tokenizer = tokenizer
        self.sampling = sampling or Sampling()
        self._lock = threading.Lock()

    def describe(self) -> dict[str, Any]:
        return {
            "backend": "transformers",
            "model": self.name,
            "temperature": self.sampling.temperature,
            "max_tokens": self.sampling.max_tokens,
        }

    def _generate(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, seed: int | None
    ) -> tuple[str, int, int]:
        torch = self._torch
        ids = self.tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        if self._device is not None:
            ids = ids.to(self._device)
        kwargs: dict[str, Any] = {
            "max_new_tokens": self.sampling.max_tokens or 1024,  # a local model needs a cap
            "pad_token_id": self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
        }
        if self.sampling.temperature > 0:
            kwargs.update(do_sample=True, temperature=self.sampling.temperature)
            if self.sampling.top_p is not None:
                kwargs["top_p"] = self.sampling.top_p
        else:
            kwargs["do_sample"] = False
        with self._lock, torch.no_grad():
            if seed is not None:
                torch.manual_seed(seed)
            out = self.model.generate(**ids, **kwargs)
        prompt_len = ids["input_ids"].shape[1]
        new = out[0, prompt_len:]
        return self.tokenizer.decode(new, skip_special_tokens=True), prompt_len, int(new.shape[0])

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        seed: int | None = None,
        usage: Usage | None = None,
    ) -> dict[str, Any]:
        text, prompt_tokens, completion_tokens = await asyncio.to_thread(self._generate, messages, tools, seed)
        if usage is not None:
            usage.requests += 1
            usage.add({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens})
        return {"role": "assistant", "content": text}

    def __deepcopy__(self, memo: dict[int, Any]) -> TransformersClient:
        return self  # one model in memory, shared by every copy of a policy


class quiet_loading:
    """transformers' weight-loading progress bars off for the block when ``quiet`` (``tau-env eval
    --quiet``, a trainer's ``--no-progress``).
    """

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.was: bool | None = None

    def __enter__(self) -> None:
        if self.quiet:
            from transformers.utils import logging as hf_logging

            self.was = hf_logging.is_progress_bar_enabled()
            hf_logging.disable_progress_bar()

    def __exit__(self, *exc: Any) -> None:
        if self.was:
            from transformers.utils import logging as hf_logging

            hf_logging.enable_progress_bar()
