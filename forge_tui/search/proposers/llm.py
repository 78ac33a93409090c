"""The ``llm`` proposer: asks an OpenAI-compatible model for children and repairs.

Every exchange (messages, reply, model, tokens, latency, finish reason, error) is stored
with :meth:`Store.add_llm_exchange` and attached to the node it produced. A reply without
usable code becomes a ``rejected`` node carrying the reason. An endpoint that cannot answer
(down, timing out or failing past the retry budget, refusing the key, unknown model) raises
:class:`~forge_tui.search.proposers.base.ProposerUnavailable`: the run pauses with that reason
and resumes later. The API key is held by the client only; it is scrubbed from everything stored.
"""

from __future__ import annotations

import json
from typing import Optional

from forge_tui import hardware
from forge_tui.core.status import NodeKind, NodeStatus, ProposerName
from forge_tui.llm import prompts
from forge_tui.llm.client import BadReply, BadRequest, ChatResult, LLMClient, LLMError
from forge_tui.llm.config import ConfigError, LLMConfig
from forge_tui.llm.parse import parse_reply
from forge_tui.search.proposers.base import Proposal, ProposerError, ProposerUnavailable, SearchContext, source_hash

#: Longest reply kept in the store (a 10 MB reply is kept as its head and a note).
MAX_STORED_REPLY = 200_000


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
        return self._ask(ctx, messages, NodeKind.PROPOSAL)

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
        )

    def _facts(self, ctx: SearchContext) -> dict:
        facts = dict(ctx.facts or {})
        if facts.get("gpu"):
            peak = hardware.peak_for(facts["gpu"])
            if peak is not None:
                facts.setdefault("bandwidth_gbs", peak.bandwidth_gbs)
        return facts

    def _record(self, messages: list[dict], result: Optional[ChatResult], error: str) -> int:
        scrub = self.client.scrub
        reply = result.text if result is not None else ""
        if len(reply) > MAX_STORED_REPLY:
            reply = reply[:MAX_STORED_REPLY] + f"\n[... reply cut: {len(reply)} characters in all ...]"
        row = self.store.add_llm_exchange(
            run_id=self.run_id,
            messages_json=scrub(json.dumps(messages)),
            reply=scrub(reply),
            model=result.model if result is not None else self.client.model,
            prompt_tokens=result.prompt_tokens if result is not None else None,
            completion_tokens=result.completion_tokens if result is not None else None,
            latency_s=result.latency_s if result is not None else None,
            finish_reason=result.finish_reason if result is not None else "",
            error=scrub(error),
        )
        return row.id

    def _ask(self, ctx: SearchContext, messages: list[dict], kind: NodeKind) -> Proposal:
        try:
            result = self.client.chat(messages)
        except (BadRequest, BadReply) as exc:
            # this request failed, the endpoint works: record a failed node and go on
            msg = str(exc)
            ex_id = self._record(messages, None, msg)
            return Proposal(
                "", f"LLM request failed ({exc.kind})", kind=kind, exchange_id=ex_id, failure=(NodeStatus.REJECTED, msg)
            )
        except LLMError as exc:
            msg = str(exc)
            self._record(messages, None, msg)
            raise ProposerUnavailable(f"LLM endpoint unavailable: {msg}") from None
        parsed = parse_reply(result.text, result.finish_reason)
        error = parsed.error
        if not error and source_hash(parsed.source) in ctx.tried:
            error = "the model returned a source identical to one already tried"
        ex_id = self._record(messages, result, error)
        if error:
            return Proposal(
                "",
                parsed.description or "unusable LLM reply",
                kind=kind,
                exchange_id=ex_id,
                failure=(NodeStatus.REJECTED, error),
            )
        return Proposal(parsed.source, parsed.description, kind=kind, exchange_id=ex_id)
