"""The decomposer's GRPO rewards (paper eq. 4-7) on hand-built rankings, and the embedder's InfoNCE
(eq. 13) and hard-negative mining (Algorithm 1) against direct computations."""
from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from magicselector.errors import InputError
from magicselector.stages.fuse import RankedList, peak_rank_fusion
from magicselector.train.rewards import (
    CounterfactualReward,
    SimilarityScorer,
    char_ngram_embed,
    counterfactual_reward,
    duplicate_task_rate,
    empty_task_rate,
    grouped_advantages,
    grpo_advantages,
    joint_reward,
    ndcg_reward,
    preference_reward,
)

GOLD = {"a", "b"}
IDEAL_2 = 1.0 + 1.0 / math.log2(3)  # DCG of a perfect ranking of two gold tools


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


# ---------------------------------------------------------------------------------------------
# eq. 4 and the counterfactual reward
# ---------------------------------------------------------------------------------------------
def test_ndcg_reward_by_hand():
    assert ndcg_reward(["a", "b", "x"], GOLD, k=3) == pytest.approx(1.0)
    assert ndcg_reward(["x", "a", "y"], GOLD, k=3) == pytest.approx((1 / math.log2(3)) / IDEAL_2)
    assert ndcg_reward(["x", "y", "a"], GOLD, k=2) == 0.0
    # a gold tool listed twice counts once (no NDCG above 1 from repeats)
    assert ndcg_reward(["a", "a", "a"], {"a"}, k=3) == pytest.approx(1.0)
    assert ndcg_reward(["x", "a", "a"], GOLD, k=3) == pytest.approx((1 / math.log2(3)) / IDEAL_2)
    with pytest.raises(InputError):
        ndcg_reward(["a"], set(), k=3)
    with pytest.raises(InputError):
        ndcg_reward(["a"], GOLD, k=0)


def test_counterfactual_no_gain_is_zero():
    for ranking in (["a", "b", "x"], ["x", "a", "y"], ["x", "y", "z"]):
        assert counterfactual_reward(ranking, ranking, GOLD, k=3) == 0.0


def test_counterfactual_full_coverage_gained():
    raw = ["x", "a", "y", "b"]  # N_raw = (1/log2 3) / IDEAL_2, b outside the top 3
    atom = ["a", "b", "x"]      # N_atom = 1, complete
    n_raw = (1 / math.log2(3)) / IDEAL_2
    assert counterfactual_reward(atom, raw, GOLD, k=3) == pytest.approx((1 - n_raw) + 1.0)
    assert counterfactual_reward(atom, raw, GOLD, k=3, l_ndcg=0.5, l_full=2.0) == pytest.approx(
        0.5 * (1 - n_raw) + 2.0)
    assert counterfactual_reward(atom, raw, GOLD, k=3, l_ndcg=0.0, l_full=1.0) == pytest.approx(1.0)


def test_counterfactual_partial_gain_without_coverage():
    raw = ["x", "y", "a"]   # a at rank 3: 1/log2(4) = 0.5
    atom = ["a", "x", "y"]  # a at rank 1; b missing in both
    expected = (1.0 - 0.5) / IDEAL_2
    assert counterfactual_reward(atom, raw, GOLD, k=3) == pytest.approx(expected)
    assert counterfactual_reward(atom, raw, GOLD, k=3, l_ndcg=2.0, l_full=5.0) == pytest.approx(2 * expected)


def test_counterfactual_lost_coverage_is_penalised():
    raw = ["a", "b", "x"]        # complete, N_raw = 1
    atom = ["a", "x", "y", "b"]  # b falls out of the top 3
    r = counterfactual_reward(atom, raw, GOLD, k=3)
    assert r == pytest.approx(-1.0)  # the NDCG drop adds nothing, losing coverage costs l_full
    assert counterfactual_reward(atom, raw, GOLD, k=3, l_full=0.25) == pytest.approx(-0.25)


def test_counterfactual_ndcg_loss_alone_is_not_negative():
    raw = ["a", "b", "x"]  # N_raw = 1
    atom = ["b", "x", "a"]  # still complete within 3, N_atom = (1 + 0.5) / IDEAL_2 < 1
    assert ndcg_reward(atom, GOLD, 3) < ndcg_reward(raw, GOLD, 3)
    assert counterfactual_reward(atom, raw, GOLD, k=3) == 0.0
    assert counterfactual_reward(atom, raw, GOLD, k=3, l_ndcg=10.0) == 0.0


# a tiny real retriever: word overlap with the tool texts (ties: catalog order), several texts
# fused by peak rank as the runtime fuses sub-task lists
TOOLS = {
    "music.play": "play music song",
    "weather.get": "weather forecast rain",
    "alarm.set": "set alarm wake",
    "sms.send": "send text message",
}


def overlap_retrieve(texts: list[str]) -> list[str]:
    lists = []
    for text in texts:
        words = set(text.lower().split())
        scores = [len(words & set(desc.split())) for desc in TOOLS.values()]
        order = sorted(range(len(TOOLS)), key=lambda i: -scores[i])
        ids = list(TOOLS)
        lists.append(RankedList([ids[i] for i in order], [float(scores[i]) for i in order]))
    return peak_rank_fusion(lists).ids


def test_counterfactual_reward_with_an_injected_retriever():
    calls: list[list[str]] = []

    def retrieve(texts):
        calls.append(list(texts))
        return overlap_retrieve(texts)

    gold = {"alarm.set", "sms.send"}
    utterance = "wake me and let mom know"
    # raw: alarm.set first, sms.send last -> only one gold in the top 2
    assert overlap_retrieve([utterance])[:2] == ["alarm.set", "music.play"]
    subtasks = ["wake me at seven", "send a text message to mom"]
    assert overlap_retrieve(subtasks)[:2] == ["sms.send", "alarm.set"]
    cf = CounterfactualReward(retrieve, k=2)
    expected = (1.0 - 1.0 / IDEAL_2) + 1.0  # NDCG gain from 1/IDEAL_2 to 1, plus coverage gained
    assert cf(subtasks, utterance, gold) == pytest.approx(expected)
    assert calls == [[utterance], subtasks]
    out = cf.outcome(subtasks, utterance, gold)
    assert out.complete_atom and not out.complete_raw and out.decomposed
    assert out.ndcg_raw == pytest.approx(1.0 / IDEAL_2) and out.ndcg_atom == pytest.approx(1.0)
    # the raw ranking may be passed in (shared by a GRPO group): same reward, one call fewer
    calls.clear()
    assert cf(subtasks, utterance, gold, raw_ranked=overlap_retrieve([utterance])) == pytest.approx(expected)
    assert calls == [subtasks]
    # a decomposition that only repeats the utterance gains nothing
    assert CounterfactualReward(overlap_retrieve, k=2)([utterance], utterance, gold) == 0.0


def test_counterfactual_reward_empty_decomposition_is_zero():
    calls = []

    def retrieve(texts):
        calls.append(texts)
        return overlap_retrieve(texts)

    cf = CounterfactualReward(retrieve, k=2)
    assert cf([], "wake me and let mom know", {"alarm.set", "sms.send"}) == 0.0
    assert cf(["", "   "], "wake me and let mom know", {"alarm.set", "sms.send"}) == 0.0
    assert calls == []
    assert not cf.outcome([], "wake me", {"alarm.set"}).decomposed
    with pytest.raises(InputError):
        CounterfactualReward(overlap_retrieve, k=0)
    with pytest.raises(InputError):
        cf("wake me", "wake me", {"alarm.set"})  # a string, not a list of sub-tasks
    with pytest.raises(InputError):
        cf(["wake me"], "wake me", set())


# ---------------------------------------------------------------------------------------------
# preference reward (eq. 5), joint reward (eq. 6)
# ---------------------------------------------------------------------------------------------
VECS = {"set an alarm": [1.0, 0.0, 0.0], "send a text": [0.0, 2.0, 0.0], "check the weather": [0.0, 0.0, 3.0],
        "set an alarm for seven": [1.0, 1.0, 0.0]}


def table_embed(texts):
    return np.array([VECS[" ".join(t.split()).lower()] for t in texts], dtype=np.float32)


def test_duplicate_and_empty_rates():
    assert duplicate_task_rate([]) == 0.0
    assert duplicate_task_rate(["set an alarm", "send a text"]) == 0.0
    assert duplicate_task_rate(["set an alarm", "Set  an ALARM ", "set an alarm", "send a text"]) == 0.5
    assert duplicate_task_rate(["", " ", "send a text"]) == 0.0  # blanks are not duplicates
    assert empty_task_rate(["", " ", "send a text", "x"]) == 0.5
    assert empty_task_rate([]) == 0.0


def test_similarity_scorer_by_hand():
    s = SimilarityScorer(table_embed, duplicate_penalty=0.4, empty_penalty=0.3)
    ref = ["set an alarm", "send a text"]
    assert s.score(ref, ref) == pytest.approx(1.0)
    # one of two reference tasks: precision 1, coverage (1 + 0) / 2 -> similarity 0.75
    assert s.score(["set an alarm"], ref) == pytest.approx(0.75)
    # cos([1,1,0], [1,0,0]) = cos([1,1,0], [0,1,0]) = 1/sqrt2 for both directions
    c = 1 / math.sqrt(2)
    assert s.score(["set an alarm for seven"], ref) == pytest.approx(0.5 * (c + c))
    # a repeat: similarity unchanged (the repeat takes part once), minus 0.4 * 1/3
    assert s.score(["set an alarm", "send a text", "SET an alarm"], ref) == pytest.approx(1 - 0.4 / 3)
    # a blank task: minus 0.3 * 1/3
    assert s.score(["set an alarm", "", "send a text"], ref) == pytest.approx(1 - 0.3 / 3)
    assert s.score([], ref) == 0.0
    with pytest.raises(InputError):
        s.score(["set an alarm"], ["  "])


def test_preference_reward():
    s = SimilarityScorer(table_embed, duplicate_penalty=0.4, empty_penalty=0.3)
    ref = ["set an alarm", "send a text"]
    assert preference_reward(ref, ref, s) == pytest.approx(0.5)
    assert preference_reward(["set an alarm"], ref, s) == pytest.approx(sigmoid(0.75 - 1.0))
    hacked = ["set an alarm", "send a text", "set an alarm", "send a text"]
    assert preference_reward(hacked, ref, s) == pytest.approx(sigmoid(-0.4 * 0.5))
    assert preference_reward(hacked, ref, s) < preference_reward(ref, ref, s)
    # the reference's own score comes from the same scorer (here it has a repeat itself)
    ref_dup = ["set an alarm", "set an alarm"]
    assert preference_reward(["set an alarm"], ref_dup, s) == pytest.approx(sigmoid(1.0 - (1.0 - 0.4 * 0.5)))

    class Length:  # any object with score(candidate, reference) can be swapped in
        def score(self, candidate, reference):
            return -abs(len(candidate) - len(reference))

    assert preference_reward(["x"], ["y", "z", "w"], Length()) == pytest.approx(sigmoid(-2.0))


def test_preference_reward_default_scorer():
    ref = ["Set an alarm for 7 am", "Text Mom that I am late"]
    assert preference_reward(["set an  ALARM for 7 am", "text mom that i am late"], ref) == pytest.approx(0.5)
    assert preference_reward(ref + [ref[0]], ref) < 0.5
    assert preference_reward(["order a pizza"], ref) < preference_reward(["set an alarm for 7"], ref) < 0.5
    v = char_ngram_embed(["Set an alarm", "set  an alarm", ""])
    assert v.shape == (3, 512) and np.allclose(v[0], v[1]) and not v[2].any()
    assert np.linalg.norm(v[0]) == pytest.approx(1.0)


def test_rewards_module_needs_no_torch():
    code = "import sys, magicselector.train.rewards; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_joint_reward():
    assert joint_reward(0.8, 1.5) == pytest.approx(0.5 * 0.8 + 1.0 * 1.5)
    assert joint_reward(0.8, -1.0, alpha=0.2, beta=2.0) == pytest.approx(0.16 - 2.0)
    assert joint_reward(0.3, 0.7, alpha=0.0, beta=1.0) == pytest.approx(0.7)
    with pytest.raises(InputError):
        joint_reward(float("nan"), 1.0)


# ---------------------------------------------------------------------------------------------
# GRPO advantages (eq. 7)
# ---------------------------------------------------------------------------------------------
def test_grpo_advantages():
    r = [0.1, 0.9, 0.5, 1.3]
    a = grpo_advantages(r)
    arr = np.array(r)
    assert np.allclose(a, (arr - arr.mean()) / (arr.std() + 1e-6))
    assert abs(a.sum()) < 1e-9
    assert a.argmax() == 3 and a.argmin() == 0
    for same in ([0.1, 0.1, 0.1], [1.7] * 8, [0.0]):
        out = grpo_advantages(same)
        assert out.shape == (len(same),) and np.all(out == 0.0)
    with pytest.raises(InputError):
        grpo_advantages([])
    with pytest.raises(InputError):
        grpo_advantages([0.1, float("inf")])


def test_grouped_advantages():
    flat = [0.1, 0.9, 0.5, 0.3, 0.3, 0.3, -1.0, 2.0, 0.0]
    a = grouped_advantages(flat, 3)
    assert a.shape == (9,)
    for g in range(3):
        assert abs(a[3 * g:3 * g + 3].sum()) < 1e-9
        assert np.allclose(a[3 * g:3 * g + 3], grpo_advantages(flat[3 * g:3 * g + 3]))
    assert np.all(a[3:6] == 0.0)
    with pytest.raises(InputError):
        grouped_advantages(flat, 4)


# ---------------------------------------------------------------------------------------------
# embedder: InfoNCE (eq. 13) and hard negatives
# ---------------------------------------------------------------------------------------------
def _loop_info_nce(q, p, n, tau, in_batch, excluded=()):
    torch = pytest.importorskip("torch", reason="needs the train extra: pip install -e .[train]")
    losses = []
    for i in range(q.shape[0]):
        cos = lambda a, b: torch.dot(a, b) / (a.norm() * b.norm())  # noqa: E731
        logits = [cos(q[i], p[i]) / tau]
        if n is not None:
            logits += [cos(q[i], n[i, j]) / tau for j in range(n.shape[1])]
        if in_batch:
            logits += [cos(q[i], p[j]) / tau for j in range(q.shape[0]) if j != i and (i, j) not in excluded]
        logits = torch.stack(logits)
        losses.append(-(logits[0] - torch.logsumexp(logits, dim=0)))
    return torch.stack(losses).mean()


def test_info_nce_matches_a_loop():
    torch = pytest.importorskip("torch", reason="needs the train extra: pip install -e .[train]")
    from magicselector.train.embedder_losses import info_nce

    g = torch.Generator().manual_seed(0)
    q = torch.randn(4, 8, generator=g) * 3  # unnormalised on purpose
    p = torch.randn(4, 8, generator=g)
    n = torch.randn(4, 3, 8, generator=g) * 0.5
    for tau in (0.05, 0.7):
        assert float(info_nce(q, p, n, tau)) == pytest.approx(float(_loop_info_nce(q, p, n, tau, False)), abs=1e-5)
        assert float(info_nce(q, p, n, tau, in_batch=True)) == pytest.approx(
            float(_loop_info_nce(q, p, n, tau, True)), abs=1e-5)
    assert float(info_nce(q, p, None, 0.1, in_batch=True)) == pytest.approx(
        float(_loop_info_nce(q, p, None, 0.1, True)), abs=1e-5)
    # the same tool as positive of queries 0 and 2, and tool "t3" gold for query 1 too:
    # those in-batch negatives are dropped
    excluded = {(0, 2), (2, 0), (1, 3)}
    got = info_nce(q, p, n, 0.05, in_batch=True, pos_ids=["t0", "t1", "t0", "t3"],
                   gold=[{"t0"}, {"t1", "t3"}, {"t0"}, {"t3"}])
    assert float(got) == pytest.approx(float(_loop_info_nce(q, p, n, 0.05, True, excluded)), abs=1e-5)
    # scale does not matter (cosine), and gradients flow
    qq = (q * 10).requires_grad_(True)
    loss = info_nce(qq, p, n)
    assert float(loss.detach()) == pytest.approx(float(info_nce(q, p, n)), abs=1e-5)
    loss.backward()
    assert qq.grad is not None and torch.isfinite(qq.grad).all()
    with pytest.raises(InputError):
        info_nce(q, p, None)  # no negatives at all
    with pytest.raises(InputError):
        info_nce(q, p, n[:2])
    with pytest.raises(InputError):
        info_nce(q, p, n, temperature=0.0)


def test_info_nce_prefers_the_positive():
    torch = pytest.importorskip("torch", reason="needs the train extra: pip install -e .[train]")
    from magicselector.train.embedder_losses import info_nce

    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    good = info_nce(q, q.clone(), q.flip(1)[:, None, :], 0.1)  # positive cos 1, negative cos 0
    bad = info_nce(q, q.flip(1), q[:, None, :], 0.1)
    assert float(good) < 1e-3 < float(bad)


def test_mine_embedder_negatives():
    pytest.importorskip("torch", reason="needs the train extra: pip install -e .[train]")
    from magicselector.train.embedder_losses import mine_embedder_negatives

    ids = ["t0", "t1", "t2", "t3", "t4"]
    # cosines to q0 = [1, 0]: t0 1.0, t1 0.8, t2 0.6, t3 0.0, t4 ~0.447 (t4 has a large norm but a
    # worse angle than t1 and t2: mining must rank by cosine, not by dot product)
    tools = np.array([[2.0, 0.0], [0.8, 0.6], [0.6, 0.8], [0.0, 1.0], [10.0, 20.0]])
    queries = np.array([[1.0, 0.0], [0.0, 5.0]])
    gold = [{"t0"}, {"t3", "t2"}]
    out = mine_embedder_negatives(queries, tools, ids, gold, k=2, pool=5)
    assert out == [["t1", "t2"], ["t4", "t1"]]  # q1 = [0, 1]: t3 1.0, t4 .894, t2 .8, t1 .6, t0 0
    for negs, g in zip(out, gold):
        assert not set(negs) & g
    # the pool limits the candidates: top 2 of q0 are t0 (gold) and t1 -> one negative
    assert mine_embedder_negatives(queries, tools, ids, gold, k=2, pool=2) == [["t1"], ["t4"]]
    # more negatives than the pool holds non-gold tools: all of them, best first
    assert mine_embedder_negatives(queries, tools, ids, gold, k=10, pool=5) == [
        ["t1", "t2", "t4", "t3"], ["t4", "t1", "t0"]]
    # torch input, chunked, the same answer
    import torch

    assert mine_embedder_negatives(torch.tensor(queries), torch.tensor(tools), ids, gold, k=2, pool=5,
                                   chunk=1) == out
    with pytest.raises(InputError):
        mine_embedder_negatives(queries, tools, ids[:4], gold, k=2, pool=5)
    with pytest.raises(InputError):
        mine_embedder_negatives(queries, tools, ids, gold[:1], k=2, pool=5)
    with pytest.raises(InputError):
        mine_embedder_negatives(queries, tools, ids, gold, k=0, pool=5)
