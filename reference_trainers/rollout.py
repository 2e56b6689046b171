r"""The rollout, tokens in and tokens out: the exact token sequence a policy sampled in one episode.

A multi-turn RL sample must be the sequence the rollout engine actually saw and produced, so the
agent's own turns are never re-tokenized from text. :class:`TrajectoryBuilder` builds it
incrementally, turn by turn:

1. :meth:`~TrajectoryBuilder.start`: the chat template's prompt for the first observation
   (system prompt and tool schemas, the env's greeting, the user's first message) with the
   generation prompt; mask 0.
2. :meth:`~TrajectoryBuilder.add_generated`: the token ids the engine sampled for the agent's
   turn, mask 1, with the engine's log-probabilities.
3. :meth:`~TrajectoryBuilder.add_messages`: what the env added since (tool results, the user's
   reply), rendered as the chat template renders them after an assistant turn, then the next
   generation prompt; mask 0. The template's text is found by rendering the conversation with a
   placeholder assistant turn, without and with the new messages, and taking the difference.

   The end of the generated turn: the template closes an assistant turn with its end-of-turn text
   (``<|im_end|>\n`` for ChatML). When the engine stopped on the end-of-turn token, the
   generated ids hold it (mask 1) and only the rest (``\n``) is added with mask 0; when it did not
   (the turn hit ``max_new_tokens``, or stopped on another token), the whole end-of-turn text is
   added with mask 0 and ``info["eot_added"]`` counts it.

Tool schemas are rendered once, at :meth:`~TrajectoryBuilder.start`: when the env activates more
tools later (``unlock_tool``), the sampled prefix cannot change, so the model keeps the first
schemas and ``info["tools_changed"]`` says so.

:func:`parse_generation` turns generated text into the assistant message the env gets. The policies
that play tau_env's agent seat with this builder are in
:mod:`tau_env.reference_trainers.rollout_policy`.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import Any

from tau_env.error import Error, InvalidOptionError
from tau_env.llm.parsing import to_action

#: Stands for an assistant turn's text when rendering (never tokenized).
PLACEHOLDER = "TAU_ENV_ASSISTANT_TURN_7F3A"

#: Tokenizer families :func:`parse_generation` reads: all print hermes-style ``<tool_call>`` blocks.
FAMILIES = ("qwen", "smollm2", "hermes")


class RolloutError(Error):
    """A rollout cannot be built token by token (a chat template that rewrites earlier turns, a
    builder used out of order).
    """


@dataclass
class TokenTrajectory:
    """One episode of the agent seat as the exact token sequence that was sampled.

    Attributes:
        task_id: The episode's task.
        seed: The episode's seed.
        input_ids: The whole sequence: prompts, the env's additions and the generated turns.
        agent_mask: 1 on tokens the policy generated, 0 elsewhere (same length as ``input_ids``).
        rollout_logprobs: The rollout engine's log-probability of each generated token; 0.0 where
            ``agent_mask`` is 0.
        reward: The episode's reward, once the caller (or :meth:`TokenTrajectory.from_result`) sets it.
        messages: The agent's chat as the env recorded it (OpenAI format, system first).
        info: ``turns`` (generated turns), ``generated_messages`` (the indices in ``messages`` of
            the env's records of the generated turns), ``eot_added`` (end-of-turn tokens added with mask 0),
            ``tools_changed``, ``context_overflow``, ``finish_reasons``, ``termination_reason`` and
            ``trial`` once the result is attached.
    """

    task_id: str
    seed: int
    input_ids: list[int]
    agent_mask: list[int]
    rollout_logprobs: list[float]
    reward: float | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def num_agent_tokens(self) -> int:
        """How many tokens the policy generated."""
        return sum(self.agent_mask)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TokenTrajectory:
        """The trajectory :meth:`to_dict` wrote."""
        return cls(**data)


def _render(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    chat_template: str | None,
    add_generation_prompt: bool,
) -> str:
    try:
        return tokenizer.apply_chat_template(
            messages,
            tools=tools or None,
            chat_template=chat_template,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
        )
    except (MemoryError, KeyboardInterrupt, RecursionError):
        raise
    except Exception as e:  # jinja2's syntax and undefined errors, a template's raise_exception(...)
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise RolloutError(
            f"The chat template does not render this conversation ({type(e).__name__}: {first[:200]}); it is "
            "damaged or expects other messages: use the template the model was trained with."
        ) from e


#: A conversation of every kind of message a rollout renders (the agent's text and tool calls, a tool
#: result, the user), with one tool: what :func:`check_chat_template` renders.
_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "get_card",
        "description": "Look up a card.",
        "parameters": {"type": "object", "properties": {"card_id": {"type": "string"}}, "required": ["card_id"]},
    },
}
_PROBE = [
    {"role": "system", "content": "You are the bank's agent."},
    {"role": "assistant", "content": "Hello, how can I help?"},
    {"role": "user", "content": "My card 4410 is lost."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "get_card", "arguments": {"card_id": "4410"}}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_0", "name": "get_card", "content": '{"status": "active"}'},
    {"role": "assistant", "content": "I see it."},
    {"role": "user", "content": "Thanks."},
]


def check_chat_template(tokenizer: Any, chat_template: str | None, where: str) -> None:
    """Refuse, before anything runs, a chat template that does not render a conversation of every kind
    of message a rollout holds (``where`` names whose template it is in the error).
    """
    try:
        for end in (3, len(_PROBE)):
            _render(tokenizer, _PROBE[:end], [_PROBE_TOOL], chat_template, True)
    except RolloutError as e:
        raise RolloutError(f"{where}: {e}") from e


class TrajectoryBuilder:
    """Builds one episode's exact token sequence incrementally (see the module's docstring).

    Args:
        tokenizer: A Hugging Face tokenizer with a chat template (or pass ``chat_template``).
        tools: The agent's tool schemas (OpenAI format), rendered into the prompt by the template.
        chat_template: A Jinja chat template used instead of the tokenizer's own.
        task_id: The episode's task, recorded in the trajectory.
        seed: The episode's seed, recorded in the trajectory.
    """

    def __init__(
        self,
        tokenizer: Any,
        tools: list[dict[str, Any]] | None = None,
        chat_template: str | None = None,
        *,
        task_id: str = "",
        seed: int = 0,
    ):
        self.tokenizer = tokenizer
        self.tools = list(tools) if tools else None
        self.chat_template = chat_template
        self.task_id, self.seed = task_id, seed
        self.input_ids: list[int] = []
        self.agent_mask: list[int] = []
        self.logprobs: list[float] = []
        self.messages: list[dict[str, Any]] = []
        self.info: dict[str, Any] = {
            "turns": 0,
            "eot_added": 0,
            "tools_changed": False,
            "context_overflow": False,
            "generated_messages": [],
        }
        self._pending: list[int] | None = None  # the last generated turn, not closed yet
        self._last_turn: tuple[int, list[int]] | None = None  # (sequence length after it, its ids)
        self._open_prompt = 0  # trailing tokens that are a generation prompt no turn has answered yet
        self._generation_prompt = ""  # the template's generation prompt text (``<|im_start|>assistant\n``)
        self._eot_text, self._eot_id, self._eot_len = "", None, 0
        self._started = self._closed = False

    # --- rendering -------------------------------------------------------------------------------
    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = False) -> str:
        """The chat template's text for ``messages`` (with this builder's tools and template)."""
        return _render(self.tokenizer, messages, self.tools, self.chat_template, add_generation_prompt)

    def encode(self, text: str) -> list[int]:
        """Token ids of template text (special tokens in it parsed as such, none added)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _append(self, ids: list[int], mask: int, logprobs: list[float] | None = None) -> None:
        self.input_ids += ids
        self.agent_mask += [mask] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)

    def _append_prompt(self, ids: list[int]) -> None:
        """Append mask-0 ``ids`` that end with the generation prompt, remembering how many tokens it is."""
        self._append(ids, 0)
        tail = self.encode(self._generation_prompt) if self._generation_prompt else []
        self._open_prompt = len(tail) if tail and ids[-len(tail) :] == tail else 0

    def _drop_open_prompt(self) -> None:
        """Take back a generation prompt that no generated turn followed (the sequence goes on with the
        env's messages, or ends): the template renders no empty assistant header there.
        """
        if self._open_prompt:
            del self.input_ids[-self._open_prompt :], self.agent_mask[-self._open_prompt :]
            del self.logprobs[-self._open_prompt :]
            self._open_prompt = 0

    def _owed_end(self, ids: list[int]) -> str:
        """The end-of-turn text the template still puts after a generated turn of ``ids``."""
        if self._eot_id is not None and ids and ids[-1] == self._eot_id:
            return self._eot_text[self._eot_len :]
        return self._eot_text

    @property
    def prompt_ids(self) -> list[int]:
        """The sequence so far (a copy)."""
        return list(self.input_ids)

    @property
    def end_of_turn_tokens(self) -> int:
        """How many tokens the template's end-of-turn text adds after a turn that stopped without it
        (a turn cut at its token limit); 0 before :meth:`start`.
        """
        return len(self.encode(self._eot_text)) if self._eot_text else 0

    @property
    def eot_token_id(self) -> int | None:
        """The template's end-of-turn token after an assistant turn (``<|im_end|>``), when it is one token."""
        return self._eot_id

    # --- building --------------------------------------------------------------------------------
    def start(self, messages: list[dict[str, Any]]) -> list[int]:
        """Begin with the first observation's ``messages``: their prompt, with the generation prompt.

        Returns:
            The prompt's token ids (mask 0).
        """
        if self._started:
            raise RolloutError("This builder has started already: use one TrajectoryBuilder per episode.")
        self._started = True
        self.messages = copy.deepcopy(list(messages))
        prompt = self.render(self.messages, add_generation_prompt=True)
        plain = self.render(self.messages, add_generation_prompt=False)
        self._generation_prompt = prompt[len(plain) :] if prompt.startswith(plain) else ""
        self._append_prompt(self.encode(prompt))
        # the template's text after an assistant turn's content: its end-of-turn
        closed = self.render([*self.messages, {"role": "assistant", "content": PLACEHOLDER}])
        at = closed.rfind(PLACEHOLDER)
        if at < 0:
            raise RolloutError(
                "The chat template does not render an assistant message's content; a rollout needs a template "
                "that renders every message."
            )
        self._eot_text = closed[at + len(PLACEHOLDER) :]
        eot_ids = self.encode(self._eot_text)
        special = set(getattr(self.tokenizer, "all_special_ids", ()) or ()) | set(
            getattr(self.tokenizer, "added_tokens_decoder", {}) or {}
        )
        self._eot_id = eot_ids[0] if eot_ids and eot_ids[0] in special else None
        if self._eot_id is not None:
            eot = self.tokenizer.decode([self._eot_id], skip_special_tokens=False)
            if self._eot_text.startswith(eot):
                self._eot_len = len(eot)
            else:
                self._eot_id = None
        return self.prompt_ids

    def add_generated(self, token_ids: list[int], logprobs: list[float], finish_reason: str | None = None) -> None:
        """Append the agent turn the engine sampled: ``token_ids`` with mask 1 and their ``logprobs``.

        Args:
            token_ids: The sampled ids, as the engine returned them (with the stop token when it
                stopped on one).
            logprobs: The engine's log-probability of each sampled id.
            finish_reason: The engine's reason (``"stop"``, ``"length"``), recorded in ``info``.
        """
        if not self._started or self._closed:
            raise RolloutError("add_generated needs a started, open builder: call start(messages) first.")
        if self._pending is not None:
            raise RolloutError("Two generated turns in a row: add the env's messages (add_messages) in between.")
        token_ids, logprobs = [int(t) for t in token_ids], [float(x) for x in logprobs]
        if len(token_ids) != len(logprobs):
            raise InvalidOptionError(
                f"add_generated needs one log-probability per token: got {len(token_ids)} ids and "
                f"{len(logprobs)} log-probabilities."
            )
        self._append(token_ids, 1, logprobs)
        self._pending, self._open_prompt = token_ids, 0
        self._last_turn = (len(self.input_ids), token_ids)
        self.info["turns"] += 1
        if finish_reason is not None:
            self.info.setdefault("finish_reasons", []).append(finish_reason)

    def _close_turn(self) -> str:
        """The end-of-turn text still owed after the last generated turn (and count an added eot)."""
        ids, self._pending = self._pending, None
        if ids is None:
            return ""
        owed = self._owed_end(ids)
        if owed == self._eot_text:
            self.info["eot_added"] += 1
        return owed

    def add_messages(
        self,
        new_messages: list[dict[str, Any]],
        *,
        assistant_message: dict[str, Any] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """Append what the env added since the last generated turn, as the template renders it, with mask 0.

        Args:
            new_messages: The env's new messages (tool results, the user's reply).
            assistant_message: The env's record of the generated turn (its tool calls let templates
                that check them render the tool results); None: a plain assistant turn stands for it.
            add_generation_prompt: End with the template's generation prompt (False at the episode's end).

        Returns:
            The whole sequence so far (the next prompt).
        """
        if not self._started or self._closed:
            raise RolloutError("add_messages needs a started, open builder: call start(messages) first.")
        new_messages = copy.deepcopy(list(new_messages))
        generated = self._pending is not None
        if not generated:
            self._drop_open_prompt()
        owed = self._close_turn()
        history = self.messages
        if generated:
            turn = {"role": "assistant", "content": PLACEHOLDER}
            if assistant_message and assistant_message.get("tool_calls"):
                turn["tool_calls"] = assistant_message["tool_calls"]
            history = [*history, turn]
        before = self.render(history, add_generation_prompt=False)
        after = self.render([*history, *new_messages], add_generation_prompt=add_generation_prompt)
        if not after.startswith(before):
            raise RolloutError(
                "The chat template renders the conversation's earlier turns differently once new messages "
                f"follow (it changed after {len(before)} characters), so the sequence cannot be extended token "
                "by token; use a template that renders each turn independently of later ones."
            )
        added = self.encode(owed + after[len(before) :])
        if add_generation_prompt:
            self._append_prompt(added)
        else:
            self._append(added, 0)
        recorded = assistant_message or {"role": "assistant", "content": None}
        if generated:
            self.info["generated_messages"].append(len(self.messages))
        self.messages += ([copy.deepcopy(recorded)] if generated else []) + new_messages
        return self.prompt_ids

    def sync(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> list[int]:
        """Bring the sequence up to the env's observation ``messages`` (the whole agent chat) and
        return the next prompt: :meth:`start` on the first call, else :meth:`add_messages` with the
        messages after the env's record of the last generated turn.

        Raises:
            RolloutError: ``messages`` does not extend the chat seen so far.
        """
        if not self._started:
            return self.start(messages)
        if tools is not None and list(tools) != (self.tools or []):
            self.info["tools_changed"] = True
        n = len(self.messages)
        generated = self._pending is not None
        if len(messages) < n + generated or messages[:n] != self.messages:
            raise RolloutError(
                f"The observation's chat ({len(messages)} messages) does not extend the one this trajectory holds "
                f"({n} messages{' and a generated turn' if generated else ''}): one builder follows one episode."
            )
        if generated:
            if messages[n].get("role") != "assistant":
                raise RolloutError(
                    f"Expected the env's record of the generated turn (an assistant message) at position {n}, got "
                    f"a {messages[n].get('role')!r} message."
                )
            return self.add_messages(messages[n + 1 :], assistant_message=messages[n])
        return self.add_messages(messages[n:])

    def close(self, final_messages: list[dict[str, Any]] | None = None, *, after_last_turn: bool = True) -> None:
        """End the sequence: the last turn's end-of-turn text and, from ``final_messages`` (the
        agent's final chat, e.g. ``EpisodeResult.agent_view["messages"]``), what the env added after
        it, without a generation prompt. Nothing can be added afterwards; closing again does nothing.

        ``after_last_turn=False``: end with the last generated turn's end-of-turn text instead (as
        :meth:`end_at_last_turn`), its record from ``final_messages`` kept in :attr:`messages`; the
        env's messages after it are left out of both.
        """
        if self._closed or not self._started:
            self._closed = True
            return
        n, generated = len(self.messages), self._pending is not None
        if not after_last_turn:
            if generated and final_messages is not None and len(final_messages) > n:
                if final_messages[n].get("role") == "assistant":
                    self.add_messages([], assistant_message=final_messages[n], add_generation_prompt=False)
            self.end_at_last_turn()
            return
        if final_messages is not None and len(final_messages) > n:
            if not generated:
                self.add_messages(final_messages[n:], add_generation_prompt=False)
            elif final_messages[n].get("role") == "assistant":
                self.add_messages(
                    final_messages[n + 1 :], assistant_message=final_messages[n], add_generation_prompt=False
                )
        if self._pending is not None:
            self._append(self.encode(self._close_turn()), 0)
        self._drop_open_prompt()
        self._closed = True

    def end_at_last_turn(self) -> None:
        """End the sequence right after the last generated turn (its end-of-turn text included) and
        close it: what the env added since, and the generation prompt after it, are taken back, and the
        chat is cut after the env's record of that turn. For a prompt that left no room to generate
        (the policy's ``max_context``): the sequence keeps every agent token and nothing after them
        that no agent token was sampled from. Before any generated turn, only the open generation
        prompt is taken back.
        """
        if self._closed or not self._started:
            self._closed = True
            return
        if self._pending is not None:  # the last turn has not been followed by anything yet
            self._append(self.encode(self._close_turn()), 0)
        elif self._last_turn is not None:
            end, ids = self._last_turn
            del self.input_ids[end:], self.agent_mask[end:], self.logprobs[end:]
            self._append(self.encode(self._owed_end(ids)), 0)
            self.messages = self.messages[: self.info["generated_messages"][-1] + 1]
            self._open_prompt = 0
        else:
            self._drop_open_prompt()
        self._closed = True

    def trajectory(
        self,
        reward: float | None = None,
        final_messages: list[dict[str, Any]] | None = None,
        *,
        after_last_turn: bool = True,
    ) -> TokenTrajectory:
        """The finished :class:`TokenTrajectory` (closes the builder as :meth:`close` does; may be
        called again).
        """
        self.close(final_messages, after_last_turn=after_last_turn)
        return TokenTrajectory(
            task_id=self.task_id,
            seed=self.seed,
            input_ids=list(self.input_ids),
            agent_mask=list(self.agent_mask),
            rollout_logprobs=list(self.logprobs),
            reward=reward,
            messages=copy.deepcopy(self.messages),
            info=copy.deepcopy(self.info),
        )


def parse_generation(text: str, tokenizer_family: str = "hermes", *, call_prefix: str = "gen") -> dict[str, Any]:
    """The assistant message (content and tool calls) the env gets for a generated turn's text.

    Every supported family prints tool calls in the hermes style, ``<tool_call>{"name": ...,
    "arguments": {...}}</tool_call>`` (Qwen2.5/3; SmolLM2 with
    :data:`~tau_env.reference_trainers.chat_templates.SMOLLM2_TOOLS_TEMPLATE`, as the end-to-end
    test serves it through vLLM). A malformed block becomes a call with an empty name (the env
    answers it with a tool error); end-of-turn markers left in the text are removed.

    Args:
        text: The generated text (decoded ids, special tokens kept or not).
        tokenizer_family: ``"qwen"``, ``"smollm2"`` or ``"hermes"``.
        call_prefix: Prefix of the tool-call ids.
    """
    if tokenizer_family not in FAMILIES:
        raise InvalidOptionError(
            f"Unknown tokenizer family {tokenizer_family!r}; expected one of {', '.join(FAMILIES)}."
        )
    for marker in ("<|im_end|>", "<|endoftext|>", "<|im_start|>assistant\n"):
        text = text.replace(marker, "")
    text = text.strip()
    return to_action({"role": "assistant", "content": text or None}, call_prefix=call_prefix)
