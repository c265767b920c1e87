"""The training losses as objects a trainer takes, as sentence-transformers has them: each is
called as ``loss(outputs, labels)`` with the model's outputs for a batch and the batch's labels
(both mappings of tensors or lists), and ``describe()`` says what it is for ``train_config.json``.

``InfoNCELoss``: the embedder's eq. 13 with explicit (hard) negatives and, optionally, in-batch ones
(``embedder_losses.info_nce``). ``TeacherKLInfoNCELoss``: eq. 13 plus the KL divergence towards a
teacher's distribution over the same candidates (``teacher.EmbeddingTeacher``, which reads the texts). ``PointwiseBCELoss`` / ``ListwiseCELoss``: the reranker's eq. 16 and
eq. 18-19 (``pointwise_bce`` / ``listwise_ce``, here; ``reranker`` re-exports them), distilled from
a teacher's logits when the labels carry them (``teacher_logits``) and ``distill_weight`` is set.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch
import torch.nn.functional as F

from magicselector.errors import InputError

from .embedder_losses import info_nce, nce_logits, teacher_kl


def pointwise_bce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Eq. 16, averaged over pairs: -[y log sigma(s) + (1 - y) log(1 - sigma(s))].

    ``logits`` are the raw scores s(q, t_i) (any shape), ``labels`` the 0/1 relevance y_i (same shape).
    """
    logits = logits.reshape(-1).float()
    labels = labels.reshape(-1).to(logits.dtype)
    if logits.numel() != labels.numel():
        raise InputError(f"pointwise_bce: {logits.numel()} logits but {labels.numel()} labels")
    if logits.numel() == 0:
        raise InputError("pointwise_bce: no pairs")
    return F.binary_cross_entropy_with_logits(logits, labels, reduction="mean")


def listwise_ce(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. 18-19, averaged over lists.

    Our reading: for each list (a query's candidates t_1..t_n; ``mask`` marks the real items of a
    padded [B, L] batch), P_i = softmax(s)_i over the list's items (eq. 18), the target distribution
    P*_i is the gold indicator y_i normalised to sum 1 over the list (P*_i = y_i / sum_j y_j, so
    several gold tools share the mass equally), and L_list = -sum_i P*_i log P_i (eq. 19). With one
    gold per list (stage 2 here) this is the softmax cross-entropy with the gold as the class.
    ``targets`` may be any non-negative weights; they are normalised the same way. A list without
    any target mass carries no signal and is an error.
    """
    if logits.dim() != 2 or targets.shape != logits.shape:
        raise InputError(f"listwise_ce: logits and targets must both be [B, L], got {tuple(logits.shape)} "
                         f"and {tuple(targets.shape)}")
    logits = logits.float()
    if mask is None:
        mask = torch.ones_like(logits, dtype=torch.bool)
    mask = mask.to(torch.bool)
    if mask.shape != logits.shape:
        raise InputError(f"listwise_ce: mask must be {tuple(logits.shape)}, got {tuple(mask.shape)}")
    targets = torch.where(mask, targets.to(logits.dtype), torch.zeros_like(logits))
    if (targets < 0).any():
        raise InputError("listwise_ce: targets must be non-negative")
    mass = targets.sum(dim=1, keepdim=True)
    if (mass <= 0).any():
        bad = int(torch.nonzero(mass.reshape(-1) <= 0)[0])
        raise InputError(f"listwise_ce: list {bad} has no gold item (its targets sum to 0 over the mask)")
    p_star = targets / mass
    masked = logits.masked_fill(~mask, float("-inf"))
    log_p = torch.log_softmax(masked, dim=1)
    log_p = torch.where(mask, log_p, torch.zeros_like(log_p))  # keep -inf * 0 out of the sum
    return -(p_star * log_p).sum(dim=1).mean()


def distilled_labels(labels: torch.Tensor, teacher_logits: torch.Tensor, weight: float) -> torch.Tensor:
    """Point-wise soft targets for eq. 16: ``(1 - weight) y + weight sigmoid(t)``."""
    labels = labels.reshape(-1).float()
    t = teacher_logits.reshape(-1).float().to(labels.device)
    if t.numel() != labels.numel():
        raise InputError(f"distilled_labels: {labels.numel()} labels but {t.numel()} teacher logits")
    return (1.0 - weight) * labels + weight * torch.sigmoid(t)


def distilled_list_targets(targets: torch.Tensor, mask: torch.Tensor, teacher_logits: torch.Tensor,
                           weight: float) -> torch.Tensor:
    """List-wise soft targets for eq. 18-19: ``(1 - weight) P* + weight softmax(t)`` over each
    list's real items (``mask``), P* the gold indicator normalised to 1 as in :func:`listwise_ce`."""
    if not (targets.shape == mask.shape == teacher_logits.shape) or targets.dim() != 2:
        raise InputError(f"distilled_list_targets: targets, mask and teacher logits must all be [B, L], got "
                         f"{tuple(targets.shape)}, {tuple(mask.shape)}, {tuple(teacher_logits.shape)}")
    mask = mask.to(torch.bool)
    gold = torch.where(mask, targets.float(), torch.zeros_like(targets, dtype=torch.float32))
    mass = gold.sum(dim=1, keepdim=True)
    if (mass <= 0).any():
        raise InputError("distilled_list_targets: a list has no gold item")
    soft = torch.softmax(teacher_logits.float().masked_fill(~mask, float("-inf")), dim=1)
    return (1.0 - weight) * gold / mass + weight * torch.where(mask, soft, torch.zeros_like(soft))


class TrainLoss:
    """A loss a trainer takes: ``loss(outputs, labels) -> scalar tensor``."""

    name = "loss"

    def __call__(self, outputs: Mapping[str, Any], labels: Mapping[str, Any]) -> torch.Tensor:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


class InfoNCELoss(TrainLoss):
    """Eq. 13 over (query, positive, negatives) embeddings.

    outputs: ``query`` [B, D], ``positive`` [B, D], ``negatives`` [B, N, D] (or None). labels (used
    with ``in_batch``): ``pos_ids`` (each positive's tool id) and ``gold`` (each query's gold tools),
    which keep a query's own gold tools out of its in-batch negatives."""

    name = "InfoNCE (eq. 13)"

    def __init__(self, temperature: float = 0.05, in_batch: bool = False) -> None:
        self.temperature = temperature
        self.in_batch = in_batch

    def __call__(self, outputs: Mapping[str, Any], labels: Mapping[str, Any] | None = None,
                 in_batch: bool | None = None) -> torch.Tensor:
        use_in_batch = self.in_batch if in_batch is None else in_batch
        args = (outputs["query"], outputs["positive"], outputs.get("negatives"), self.temperature)
        if use_in_batch:
            labels = labels or {}
            return info_nce(*args, in_batch=True, pos_ids=labels.get("pos_ids"), gold=labels.get("gold"))
        return info_nce(*args)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "temperature": self.temperature, "in_batch": self.in_batch}


class TeacherKLInfoNCELoss(InfoNCELoss):
    """Eq. 13 plus ``weight`` x KL(teacher || student) over each query's candidates (the positive, its
    negatives and, with ``in_batch``, the batch's other positives, masked as eq. 13 masks them), both
    softmaxes at the loss's temperature. The teacher embeds texts, so the labels must carry them:
    ``query_texts`` [B], ``positive_texts`` [B] and ``negative_texts`` [B][N] (the embedder trainer
    passes them). Called with ``in_batch=False`` (the trainer's fixed probe) it is eq. 13 alone, so
    the probe stays comparable with a run without a teacher."""

    name = "InfoNCE (eq. 13) + KL to a teacher"

    def __init__(self, teacher, weight: float = 1.0, temperature: float = 0.05, in_batch: bool = True) -> None:
        if not weight >= 0:
            raise InputError(f"TeacherKLInfoNCELoss: weight must be >= 0, got {weight}")
        super().__init__(temperature, in_batch)
        self.teacher, self.weight = teacher, float(weight)

    def __call__(self, outputs: Mapping[str, Any], labels: Mapping[str, Any] | None = None,
                 in_batch: bool | None = None) -> torch.Tensor:
        use_in_batch = self.in_batch if in_batch is None else in_batch
        if in_batch is False:
            return super().__call__(outputs, labels, in_batch=False)
        labels = labels or {}
        missing = [k for k in ("query_texts", "positive_texts", "negative_texts") if k not in labels]
        if missing:
            raise InputError(f"TeacherKLInfoNCELoss: the labels lack {', '.join(missing)} (the teacher reads texts)")
        pos_ids, gold = labels.get("pos_ids"), labels.get("gold")
        neg = outputs.get("negatives")
        student, mask = nce_logits(outputs["query"], outputs["positive"], neg, self.temperature, use_in_batch,
                                   pos_ids, gold)
        nce = -torch.log_softmax(student, dim=1)[:, 0].mean()
        if self.weight == 0:
            return nce
        b = len(labels["query_texts"])
        width = neg.shape[1] if neg is not None else 0
        flat = [t for row in labels["negative_texts"] for t in row]
        with torch.no_grad():
            tq, tp = self.teacher(labels["query_texts"]), self.teacher(labels["positive_texts"])
            tn = self.teacher(flat).reshape(b, width, -1) if width else None
            teacher, _ = nce_logits(tq, tp, tn, self.temperature, use_in_batch, pos_ids, gold)
        return nce + self.weight * teacher_kl(student, teacher.to(student.device), mask)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "name": self.name, "weight": self.weight,
                "teacher": self.teacher.describe() if hasattr(self.teacher, "describe") else repr(self.teacher)}


class PointwiseBCELoss(TrainLoss):
    """Eq. 16 on pair logits. outputs: ``logits``; labels: ``labels`` (0/1 per pair) and, for
    distillation, ``teacher_logits`` (the targets become ``(1 - w) y + w sigmoid(t)``)."""

    name = "point-wise BCE (eq. 16)"

    def __init__(self, distill_weight: float | None = None) -> None:
        self.distill_weight = distill_weight

    def __call__(self, outputs: Mapping[str, Any], labels: Mapping[str, Any]) -> torch.Tensor:
        target = labels["labels"]
        teacher = labels.get("teacher_logits")
        if teacher is not None and self.distill_weight is not None:
            target = distilled_labels(target, teacher, self.distill_weight)
        return pointwise_bce(outputs["logits"], target)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "distill_weight": self.distill_weight}


class ListwiseCELoss(TrainLoss):
    """Eq. 18-19 on [B, L] list logits. outputs: ``logits``; labels: ``targets`` (gold indicators),
    ``mask`` (the real items) and, for distillation, ``teacher_logits`` (the target distribution
    becomes ``(1 - w) P* + w softmax(t)``)."""

    name = "list-wise CE (eq. 18-19)"

    def __init__(self, distill_weight: float | None = None) -> None:
        self.distill_weight = distill_weight

    def __call__(self, outputs: Mapping[str, Any], labels: Mapping[str, Any]) -> torch.Tensor:
        logits = outputs["logits"]
        targets, mask = labels["targets"], labels["mask"]
        teacher = labels.get("teacher_logits")
        if teacher is not None and self.distill_weight is not None:
            targets = distilled_list_targets(targets, mask, teacher, self.distill_weight)
        return listwise_ce(logits, targets.to(logits.device), mask.to(logits.device))

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "distill_weight": self.distill_weight}
