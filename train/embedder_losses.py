"""The embedder's contrastive loss and its self-distilled hard negatives (MagicSelector paper,
section 4.1 eq. 11-13 and section 4.3 / Algorithm 1 applied to the retriever).

``info_nce``: eq. 13, per query one positive tool and N negative tools, scored by cosine
similarity over a temperature (``nce_logits`` lays the candidates out). ``teacher_kl``: the KL
divergence that pulls the student's distribution over those candidates towards a teacher's
(distillation). ``mine_embedder_negatives``: eq. 21-22 with the embedder as the
teacher, s(q, t) = cos(e_q, e_t); the candidate pool is the embedder's own top ``pool`` tools, and
the selection is ``queries.mine_hard_negatives``, so both models mine by one rule.
"""
from __future__ import annotations

from typing import Collection, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from magicselector.errors import InputError
from .queries import mine_hard_negatives


def info_nce(query_emb: torch.Tensor, pos_emb: torch.Tensor, neg_emb: torch.Tensor | None = None,
             temperature: float = 0.05, in_batch: bool = False, pos_ids: Sequence[str] | None = None,
             gold: Sequence[Collection[str]] | None = None) -> torch.Tensor:
    """Eq. 13 averaged over the batch: -log softmax over [pos, negatives] of cos(q, t) / temperature,
    with the positive as the target (the candidates as ``nce_logits`` lays them out)."""
    logits, _ = nce_logits(query_emb, pos_emb, neg_emb, temperature, in_batch, pos_ids, gold)
    return -torch.log_softmax(logits, dim=1)[:, 0].mean()


def nce_logits(query_emb: torch.Tensor, pos_emb: torch.Tensor, neg_emb: torch.Tensor | None = None,
               temperature: float = 0.05, in_batch: bool = False, pos_ids: Sequence[str] | None = None,
               gold: Sequence[Collection[str]] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 13's candidates per query and their logits cos(q, t) / temperature: [B, 1 + N (+ B)], the
    positive first, then the negatives, then (``in_batch``) the batch's positives; and the mask of
    the candidates that count (masked logits are -inf).

    query_emb [B, D], pos_emb [B, D]: query i and its positive tool; neg_emb [B, N, D]: query i's N
    negatives (may be None, or N = 0, when ``in_batch`` supplies them). Inputs need not be
    normalised: they are L2-normalised here, so the scores are cosines (eq. 12).

    in_batch: the other queries' positives are added as negatives of query i (B - 1 more per
    query). ``pos_ids`` (the tool id of each positive) drops in-batch negatives that are the same
    tool as query i's positive, and ``gold`` (query i's gold tool ids) also drops those that are
    any of query i's gold tools: a tool must not be pushed away from a query it answers.
    """
    if temperature <= 0:
        raise InputError(f"info_nce: temperature must be > 0, got {temperature}")
    if query_emb.dim() != 2 or pos_emb.shape != query_emb.shape:
        raise InputError(f"info_nce: query_emb and pos_emb must both be [B, D], got {tuple(query_emb.shape)} "
                         f"and {tuple(pos_emb.shape)}")
    b, d = query_emb.shape
    if b == 0:
        raise InputError("info_nce: empty batch")
    dtype = query_emb.dtype if query_emb.is_floating_point() else torch.float32
    q = F.normalize(query_emb.to(dtype), dim=-1)
    p = F.normalize(pos_emb.to(dtype), dim=-1)
    columns = [(q * p).sum(dim=-1, keepdim=True)]  # [B, 1]: the positive first (target index 0)
    masks = [torch.ones(b, 1, dtype=torch.bool, device=q.device)]
    if neg_emb is not None:
        if neg_emb.dim() != 3 or neg_emb.shape[0] != b or neg_emb.shape[2] != d:
            raise InputError(f"info_nce: neg_emb must be [B, N, D] = [{b}, N, {d}], got {tuple(neg_emb.shape)}")
        n = F.normalize(neg_emb.to(dtype), dim=-1)
        columns.append(torch.einsum("bd,bnd->bn", q, n))
        masks.append(torch.ones(b, n.shape[1], dtype=torch.bool, device=q.device))
    if in_batch:
        keep = ~torch.eye(b, dtype=torch.bool)  # filled on the CPU (element writes), then moved
        if gold is not None and (isinstance(gold, str) or len(gold) != b):
            raise InputError(f"info_nce: gold must hold one collection of tool ids per query (batch of {b})")
        if pos_ids is not None:
            if isinstance(pos_ids, str) or len(pos_ids) != b:
                raise InputError(f"info_nce: pos_ids must hold one tool id per query (batch of {b})")
            for i in range(b):
                own = set(gold[i]) if gold is not None else set()
                own.add(pos_ids[i])
                for j in range(b):
                    if pos_ids[j] in own:
                        keep[i, j] = False
        elif gold is not None:
            raise InputError("info_nce: gold needs pos_ids (the tool id of each positive)")
        columns.append(q @ p.T)
        masks.append(keep.to(q.device))
    if sum(c.shape[1] for c in columns) < 2:
        raise InputError("info_nce: no negatives (pass neg_emb with N >= 1, or in_batch=True with B >= 2)")
    logits = torch.cat(columns, dim=1) / temperature
    mask = torch.cat(masks, dim=1)
    if not mask[:, 1:].any(dim=1).all():
        bad = int(torch.nonzero(~mask[:, 1:].any(dim=1))[0])
        raise InputError(f"info_nce: query {bad} has no negative left after masking")
    return logits.masked_fill(~mask, float("-inf")), mask


def teacher_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """KL(teacher || student) over each query's candidates (``mask``), averaged over the batch: the
    student's softmax pulled towards the teacher's (no gradient through the teacher)."""
    if student_logits.shape != teacher_logits.shape or mask.shape != student_logits.shape:
        raise InputError(f"teacher_kl: student logits {tuple(student_logits.shape)}, teacher logits "
                         f"{tuple(teacher_logits.shape)} and mask {tuple(mask.shape)} must have one shape")
    target = torch.softmax(teacher_logits.detach().float().masked_fill(~mask, float("-inf")), dim=1)
    log_s = torch.log_softmax(student_logits.float(), dim=1).masked_fill(~mask, 0.0)  # no -inf in the sum
    terms = target * (torch.log(target.clamp_min(1e-12)) - log_s)
    return torch.where(mask, terms, torch.zeros_like(terms)).sum(dim=1).mean()


def _matrix(x, what: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().to("cpu", torch.float32).numpy()
    a = np.asarray(x, dtype=np.float32)
    if a.ndim != 2:
        raise InputError(f"mine_embedder_negatives: {what} must be a 2-D array, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise InputError(f"mine_embedder_negatives: {what} holds non-finite values")
    norms = np.linalg.norm(a, axis=1, keepdims=True)
    return np.divide(a, norms, out=np.zeros_like(a), where=norms > 0)


def mine_embedder_negatives(query_vecs, tool_vecs, tool_ids: Sequence[str], gold: Sequence[Collection[str]],
                            k: int, pool: int, chunk: int = 1024) -> list[list[str]]:
    """Hard negatives for the embedder (Algorithm 1 with s(q, t) = cos(e_q, e_t)).

    query_vecs [Q, D] and tool_vecs [T, D] (numpy or torch, any norm) are the current embedder's
    vectors; ``tool_ids[j]`` names row j of ``tool_vecs``; ``gold[i]`` is query i's gold tool ids.
    Per query, the pool is the ``pool`` tools of highest cosine (ties: catalog order), and its
    ``k`` highest-scoring non-gold tools are the negatives, best first (``mine_hard_negatives``).
    A pool with fewer than k non-gold tools gives fewer. Returns one list per query, in order.
    """
    q = _matrix(query_vecs, "query_vecs")
    t = _matrix(tool_vecs, "tool_vecs")
    tool_ids = list(tool_ids)
    if q.shape[1] != t.shape[1]:
        raise InputError(f"mine_embedder_negatives: query vectors have {q.shape[1]} dimensions, tool vectors "
                         f"{t.shape[1]}")
    if len(tool_ids) != t.shape[0]:
        raise InputError(f"mine_embedder_negatives: {len(tool_ids)} tool ids for {t.shape[0]} tool vectors")
    if len(set(tool_ids)) != len(tool_ids):
        raise InputError("mine_embedder_negatives: tool ids must be unique")
    if not tool_ids:
        raise InputError("mine_embedder_negatives: no tools")
    if len(gold) != q.shape[0]:
        raise InputError(f"mine_embedder_negatives: {len(gold)} gold sets for {q.shape[0]} queries")
    if pool < 1:
        raise InputError("mine_embedder_negatives: pool must be >= 1")
    if chunk < 1:
        raise InputError("mine_embedder_negatives: chunk must be >= 1")
    width = min(int(pool), len(tool_ids))
    out: list[list[str]] = []
    for start in range(0, q.shape[0], chunk):
        sims = q[start:start + chunk] @ t.T  # [chunk, T] cosines
        order = np.argsort(-sims, axis=1, kind="stable")[:, :width]
        scores, cands, golds = {}, {}, {}
        for r in range(sims.shape[0]):
            i = start + r
            scores[i] = sims[r, order[r]]
            cands[i] = [tool_ids[int(j)] for j in order[r]]
            if isinstance(gold[i], str):
                raise InputError(f"mine_embedder_negatives: gold[{i}] must be a collection of tool ids, "
                                 "not a single string")
            golds[i] = list(gold[i])
        mined = mine_hard_negatives(scores, cands, golds, k)  # validates k
        out += [mined[start + r] for r in range(sims.shape[0])]
    return out
