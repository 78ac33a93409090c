"""The ``llm`` proposer: asks an OpenAI-compatible model for children and repairs.

Every exchange (messages, reply, model, tokens, latency, finish reason, error) is stored
with :meth:`Store.add_llm_exchange` and attached to the node it produced; while a reply
streams, its row holds the text so far (``finish_reason`` ``streaming``, written at most every
:data:`LIVE_EVERY_S` seconds) for the app's transcript pane. A reply without usable code becomes
a ``rejected`` node carrying the reason. An endpoint that cannot answer (down, timing out or
failing past the retry budget, refusing the key, unknown model, a model that cannot chat) or
that rejects requests the same way twice in a row (a 400 every request will get) raises
:class:`~forge_tui.search.proposers.base.ProposerUnavailable`: the run pauses with the
server's message and resumes later. A prompt too long for the model's context is asked again
once without the sibling and best kernels. The API key is held by the client only; it is
scrubbed from everything stored, and so are lone surrogates.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Callable, Optional

from forge_tui import hardware
from forge_tui.core.config import run_precision
from forge_tui.core.status import NodeKind, NodeStatus, ProposerName
from forge_tui.evaluate.profile import profile_text, roofline_lines
from forge_tui.hardware import rate_text
from forge_tui.llm import prompts
from forge_tui.llm.client import BadReply, BadRequest, CannotChat, ChatResult, ContextTooLong, LLMClient, LLMError
from forge_tui.llm.client import clean_text as clean
from forge_tui.llm.config import ConfigError, LLMConfig
from forge_tui.llm.parse import ParsedReply, choose_block, code_blocks, defines_launch, parse_reply, split_reasoning
from forge_tui.search.proposers.base import Proposal, ProposerError, ProposerUnavailable, SearchContext, source_hash

#: Longest reply kept in the store (a 10 MB reply is kept as its head and a note).
MAX_STORED_REPLY = 200_000
#: The shortest interval between two writes of a streaming reply to the store (seconds).
LIVE_EVERY_S = 0.5
#: The finish_reason of an exchange whose reply is still streaming.
STREAMING = "streaming"


def _flags(backend: str) -> str:
    from forge_tui.evaluate.backends import get_backend

    return " ".join(get_backend(backend).flags)


def _kernel(node) -> prompts.KernelInfo:
    shapes = node.shapes
    return prompts.KernelInfo(
        id=node.id,
        source=node.source or "",
        description=node.description or "",
        status=node.status,
        speedup=node.speedup,
        median_ms=node.median_ms,
        shapes=shapes,
        error=node.error or "",
        profile=profile_text(getattr(node, "profile", None)),
    )


class LLMProposer:
    """Proposes children (and repairs failed ones) through an :class:`LLMClient`.

    Args:
        client: the endpoint.
        store: where exchanges are recorded.
        run_id: the run they belong to.
    """

    name = ProposerName.LLM
    #: Requests take seconds to minutes: the search runs them in threads, several at once.
    concurrent = True

    def __init__(self, client: LLMClient, store, run_id: int):
        self.client, self.store, self.run_id = client, store, run_id
        self._lock = threading.Lock()
        #: The class of the last failed request's 400 (two alike in a row pause the run).
        self._last_400 = ""
        for ex in store.live_llm_exchanges(run_id, limit=1000):  # left by a search that was stopped
            store.update_llm_exchange(ex.id, finish_reason="", error="the search stopped while this reply streamed")

    @classmethod
    def from_run(cls, run, store) -> "LLMProposer":
        """The proposer a run was created with: its stored config; the key from the environment."""
        try:
            cfg = LLMConfig.from_dict(run.config, where=f"run {run.id}'s config", strict=False)
        except (ConfigError, ValueError) as exc:
            raise ProposerError(str(exc)) from exc
        return cls(LLMClient(cfg), store, run.id)

    # ------------------------------------------------------------------ protocol
    def propose(self, ctx: SearchContext, parent) -> Optional[Proposal]:
        task = self._task_info(ctx)
        facts = self._facts(ctx)
        if parent is None:
            messages = prompts.expansion_messages(task, ctx.backend, facts, _flags(ctx.backend), None, [], None)
            return self._ask(ctx, messages, NodeKind.PROPOSAL)
        siblings = []
        tree_node = ctx.tree.nodes.get(parent.id) if ctx.tree is not None else None
        for child_id in tree_node.children if tree_node is not None else []:
            siblings.append(_kernel(self.store.get_node(child_id)))
        best = None
        best_id = ctx.tree.best_node() if ctx.tree is not None else None
        if best_id is not None and best_id != parent.id:
            best = _kernel(self.store.get_node(best_id))
        messages = prompts.expansion_messages(
            task, ctx.backend, facts, _flags(ctx.backend), _kernel(parent), siblings, best
        )
        shorter = None
        if siblings or best is not None:
            shorter = prompts.expansion_messages(
                task, ctx.backend, facts, _flags(ctx.backend), _kernel(parent), [], None
            )
        return self._ask(ctx, messages, NodeKind.PROPOSAL, shorter=shorter)

    def repair(self, ctx: SearchContext, failed) -> Optional[Proposal]:
        if not failed.source:
            return None  # nothing to repair: the model produced no code (rejected reply)
        log = ""
        for clog in self.store.compile_logs(failed.id):
            if not clog.ok:
                log = clog.log
        correctness = [c.model_dump() for c in self.store.correctness(failed.id)]
        failure = prompts.failure_text(failed.status, failed.error or "", log, correctness)
        messages = prompts.repair_messages(
            self._task_info(ctx), ctx.backend, self._facts(ctx), _flags(ctx.backend), _kernel(failed), failure
        )
        return self._ask(ctx, messages, NodeKind.REPAIR)

    # ------------------------------------------------------------------ helpers
    def _task_info(self, ctx: SearchContext) -> prompts.TaskInfo:
        t = ctx.task
        return prompts.TaskInfo(
            name=t.name,
            description=t.description,
            reference_source=t.source_text(),
            dtype=t.dtype,
            signature=t.signature(ctx.backend),
            shapes={k: dict(v) for k, v in t.shapes_for(ctx.backend).items()},
            args=[(a.name, a.role, a.dtype) for a in t.args],
            roofline=self._roofline(ctx),
            timing_mode=str(getattr(t, "timing_mode", "") or ""),
            precision=run_precision(getattr(ctx.run, "config", None) or {}),
            distributions=tuple(getattr(t, "distributions", ()) or ()),
            check_shapes={k: dict(v) for k, v in (getattr(t, "check_shapes", None) or {}).items()},
        )

    def _roofline(self, ctx: SearchContext) -> list[str]:
        """Per timed shape: bytes, the copy-bandwidth floor, and the run's eager and torch.compile
        medians (``run.baseline``); [] when the task's byte counts are unknown."""
        try:
            shapes = ctx.task.spec_dict().get("shapes") or {}
        except Exception:  # a task that cannot describe itself still gets a prompt
            return []
        if not shapes or not all(isinstance(v, dict) and v.get("bytes") for v in shapes.values()):
            return []
        base = getattr(ctx.run, "baseline", None) or {}
        facts = self._facts(ctx)
        copy_gbs = facts.get("copy_gbs") or facts.get("bandwidth_gbs")
        precision = run_precision(getattr(ctx.run, "config", None) or {})
        dtype = str(getattr(ctx.task, "dtype", "float32") or "float32")
        tflops = hardware.peak_tflops(facts.get("gpu"), dtype, precision)
        return roofline_lines(
            shapes, base.get("eager") or {}, base.get("compile") or {}, copy_gbs, tflops, rate_text(dtype, precision)
        )

    def _facts(self, ctx: SearchContext) -> dict:
        facts = dict(ctx.facts or {})
        if facts.get("gpu"):
            peak = hardware.peak_for(facts["gpu"])
            if peak is not None:
                facts.setdefault("bandwidth_gbs", peak.bandwidth_gbs)
        return facts

    def _record(
        self,
        messages: list[dict],
        result: Optional[ChatResult],
        error: str,
        *,
        exchange_id: Optional[int] = None,
        reply: Optional[str] = None,
        reasoning: str = "",
    ) -> int:
        """Store (or complete, when ``exchange_id`` names the live row) one exchange; its id."""
        scrub = self.client.scrub
        reply = (result.text if result is not None else "") if reply is None else reply
        if len(reply) > MAX_STORED_REPLY:
            reply = reply[:MAX_STORED_REPLY] + f"\n[... reply cut: {len(reply)} characters in all ...]"
        if len(reasoning) > MAX_STORED_REPLY:
            reasoning = reasoning[:MAX_STORED_REPLY] + f"\n[... reasoning cut: {len(reasoning)} characters ...]"
        request = result.request if result is not None else self.client.params()
        fields = dict(
            messages_json=clean(scrub(json.dumps(messages))),
            reply=clean(scrub(reply)),
            reasoning=clean(scrub(reasoning)),
            request_json=json.dumps(request),
            model=result.model if result is not None else self.client.model,
            prompt_tokens=result.prompt_tokens if result is not None else None,
            completion_tokens=result.completion_tokens if result is not None else None,
            latency_s=result.latency_s if result is not None else None,
            finish_reason=result.finish_reason if result is not None else "",
            error=clean(scrub(error)),
        )
        if exchange_id is not None:
            self.store.update_llm_exchange(exchange_id, **fields)
            return exchange_id
        return self.store.add_llm_exchange(run_id=self.run_id, **fields).id

    def _live(self, messages: list[dict]) -> tuple[int, Callable[[str, str], None]]:
        """A row for the reply being streamed, and the token sink that fills it (batched)."""
        row = self.store.add_llm_exchange(
            run_id=self.run_id,
            messages_json=clean(self.client.scrub(json.dumps(messages))),
            model=self.client.model,
            finish_reason=STREAMING,
            request_json=json.dumps(self.client.params()),
        )
        parts: dict[str, list[str]] = {"content": [], "reasoning": [], "status": []}
        last = [time.monotonic()]

        def sink(kind: str, text: str) -> None:
            if kind == "status":
                parts["status"] = [text]
            else:
                parts[kind].append(text)
            now = time.monotonic()
            if now - last[0] < LIVE_EVERY_S and kind != "status":
                return
            last[0] = now
            self.store.update_llm_exchange(
                row.id,
                reply=clean(self.client.scrub("".join(parts["content"])))[:MAX_STORED_REPLY],
                reasoning=clean(self.client.scrub("".join(parts["reasoning"])))[:MAX_STORED_REPLY],
                error=clean(self.client.scrub(parts["status"][-1])) if parts["status"] else "",
            )

        return row.id, sink

    def _failed_request(self, exc: BadRequest) -> None:
        """Pause the run when this 400 will repeat: a model that cannot chat, or a class seen
        on the request before this one too."""
        reason = getattr(exc, "reason", "bad_request")
        with self._lock:
            repeated, self._last_400 = self._last_400 == reason, reason
        if isinstance(exc, CannotChat) or repeated:
            raise ProposerUnavailable(f"LLM endpoint refuses every request: {exc}") from None

    def _ask(
        self, ctx: SearchContext, messages: list[dict], kind: NodeKind, *, shorter: Optional[list[dict]] = None
    ) -> Proposal:
        ex_id, sink = self._live(messages)
        try:
            try:
                result = self.client.chat(messages, on_token=sink)
            except ContextTooLong:
                if shorter is None:
                    raise
                messages = shorter  # without the sibling and best kernels: asked again once
                result = self.client.chat(messages, on_token=sink)
        except (BadRequest, BadReply) as exc:
            # this request failed, the endpoint works: record a failed node and go on
            msg = str(exc)
            self._record(messages, None, msg, exchange_id=ex_id)
            if isinstance(exc, BadRequest):
                self._failed_request(exc)
            return Proposal(
                "", f"LLM request failed ({exc.kind})", kind=kind, exchange_id=ex_id, failure=(NodeStatus.REJECTED, msg)
            )
        except LLMError as exc:
            msg = str(exc)
            self._record(messages, None, msg, exchange_id=ex_id)
            raise ProposerUnavailable(f"LLM endpoint unavailable: {msg}") from None
        except BaseException as exc:  # the live row must not stay "streaming"
            self._record(messages, None, f"{type(exc).__name__}: {exc}".splitlines()[0], exchange_id=ex_id)
            raise
        with self._lock:
            self._last_400 = ""
        thought, answer = split_reasoning(result.text)
        reasoning = "\n".join(t for t in (result.reasoning, thought) if t)
        parsed = parse_reply(result.text, result.finish_reason)
        if not parsed.ok and not answer.strip() and result.reasoning:
            parsed = _from_reasoning(result, parsed)
        error = parsed.error
        if not error and source_hash(parsed.source) in ctx.tried:
            error = "the model returned a source identical to one already tried"
        self._record(messages, result, error, exchange_id=ex_id, reply=answer, reasoning=reasoning)
        if error:
            return Proposal(
                "",
                parsed.description or "unusable LLM reply",
                kind=kind,
                exchange_id=ex_id,
                failure=(NodeStatus.REJECTED, error),
            )
        return Proposal(parsed.source, parsed.description, kind=kind, exchange_id=ex_id)


def _from_reasoning(result: ChatResult, parsed: ParsedReply) -> ParsedReply:
    """A reply whose answer is only in its reasoning field (Ollama does this with some models):
    the reasoning's last kernel block when the model finished, else why there is no answer.

    A reply cut at max_tokens (finish_reason ``length``) with no content was cut while the model
    still reasoned: a closed block in that reasoning is a draft the model had not settled on,
    never compiled (the finish reason is read before any block)."""
    if result.finish_reason == "length":
        return ParsedReply(
            "",
            "reply cut",
            "the reply was cut (finish_reason length) while the model was still reasoning: raise max_tokens",
        )
    blocks, _ = code_blocks(result.reasoning)
    chosen = choose_block(blocks)
    if chosen is not None and defines_launch(chosen.code):
        return ParsedReply(chosen.code.strip("\n") + "\n", "kernel taken from the model's reasoning field")
    return ParsedReply("", "empty reply", "the model answered only in its reasoning field, with no kernel in it")
