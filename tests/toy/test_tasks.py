"""draftlab.toy.tasks: the generator is deterministic, its splits' seeds are disjoint, the config hash is stable,
every family's training answer is valid and ≥ 48 tokens, `valid` accepts any order for `distinct` only, and a bad
config or prompt is one line."""
from __future__ import annotations

import pytest

from draftlab.errors import DraftlabError
from draftlab.toy.tasks import (FAMILIES, FamilySpec, WorldConfig, example, examples, family_of, symbol_names,
                                valid)

SPECS = {"lookup": FamilySpec("lookup", 1.0, (10, 12), (4, 6)), "distinct": FamilySpec("distinct", 1.0, (48, 56), (8, 16)),
         "interleave": FamilySpec("interleave", 1.0, (24, 32)), "shuffle": FamilySpec("shuffle", 1.0, (10, 12), (4, 5)),
         "merge": FamilySpec("merge", 1.0, (24, 28)), "swap": FamilySpec("swap", 1.0, (24, 28)),
         "mark": FamilySpec("mark", 1.0, (24, 28)), "fill": FamilySpec("fill", 1.0, (24, 28)),
         "flip": FamilySpec("flip", 1.0, (17, 20)), "drift": FamilySpec("drift", 1.0, (66, 72), (6, 18)),
         "pairfill": FamilySpec("pairfill", 1.0, (16, 18)), "capslock": FamilySpec("capslock", 1.0, (56, 64), (6, 18))}
ALL = WorldConfig(families=tuple(SPECS.get(n, FamilySpec(n)) for n in FAMILIES))


def test_deterministic_and_seeded_per_example():
    a = examples(ALL, "train", 20)
    assert a == examples(ALL, "train", 20)
    assert examples(ALL, "train", 5, start=7) == a[7:12]  # each example has its own seed
    assert [e.seed for e in a] == list(range(1_000_000_000, 1_000_000_020))
    other = WorldConfig(families=ALL.families, seed=1)
    assert [e.prompt for e in examples(other, "train", 5)] != [e.prompt for e in a[:5]]


def test_splits_are_disjoint():
    spans = [(first, first + size) for _, first, size in ALL.splits]
    for i, (a0, b0) in enumerate(spans):
        for a1, b1 in spans[i + 1:]:
            assert b0 <= a1 or b1 <= a0
    seeds = {s: {e.seed for e in examples(ALL, s, 50)} for s in ("target", "train", "eval", "heldout")}
    names = list(seeds)
    assert all(not seeds[x] & seeds[y] for i, x in enumerate(names) for y in names[i + 1:])
    with pytest.raises(DraftlabError, match="overlap"):
        WorldConfig(splits=(("target", 0, 100), ("eval", 50, 100)))
    with pytest.raises(DraftlabError, match="outside"):
        example(WorldConfig(splits=(("target", 0, 10),)), "target", 10)


def test_hash_is_stable_and_sensitive():
    assert WorldConfig().config_hash() == WorldConfig().config_hash()
    assert WorldConfig.from_dict(WorldConfig().to_dict()) == WorldConfig()
    assert WorldConfig.from_dict(WorldConfig().to_dict()).config_hash() == WorldConfig().config_hash()
    assert WorldConfig(alphabet=95).config_hash() != WorldConfig().config_hash()
    assert WorldConfig(seed=1).config_hash() != WorldConfig().config_hash()
    # pinned: a change to the defaults or to the canonical form changes this on purpose (bump `version`)
    assert len(WorldConfig().config_hash()) == 64


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_answer_is_valid_and_long(family):
    for e in examples(ALL, "eval", 30, family=family):
        assert e.family == family == family_of(e.prompt)
        assert len(e.answer.split()) >= ALL.min_answer_tokens
        assert valid(e.prompt, e.answer) and e.valid(e.answer)
        words = e.answer.split()
        assert not valid(e.prompt, " ".join(words[:-1]))  # one token short
        assert not valid(e.prompt, " ".join(words + words[-1:]))  # one token more


def test_answers_follow_their_rule():
    e = example(ALL, "eval", 3, "reverse")
    assert e.answer.split() == e.prompt.split()[2:][::-1]
    e = example(ALL, "eval", 3, "sort")
    order = {s: i for i, s in enumerate(symbol_names(ALL.alphabet))}
    assert [order[s] for s in e.answer.split()] == sorted(order[s] for s in e.prompt.split()[2:])
    e = example(ALL, "eval", 3, "interleave")
    body = e.prompt.split()[2:]
    a, b = body[:body.index("|")], body[body.index("|") + 1:]
    assert e.answer.split()[0::2] == a and e.answer.split()[1::2] == b
    e = example(ALL, "eval", 3, "lookup")
    assert e.answer.split()[0].startswith("#") and e.answer.split()[-1] == ";"


def test_distinct_accepts_any_order_and_nothing_else():
    e = example(ALL, "eval", 0, "distinct")
    words = e.answer.split()
    body = e.prompt.split()[2:]
    assert len(body) > len(words) and set(body) == set(words)  # the prompt repeats some symbols
    assert valid(e.prompt, " ".join(sorted(words))) and valid(e.prompt, " ".join(reversed(words)))
    assert not valid(e.prompt, " ".join(words + words[:1]))  # a symbol twice
    assert not valid(e.prompt, " ".join(words[1:]))  # one missing
    outsider = next(s for s in symbol_names(ALL.alphabet) if s not in words)
    assert not valid(e.prompt, " ".join(words[1:] + [outsider]))
    # deterministic families accept one order only
    c = example(ALL, "eval", 0, "copy")
    assert not valid(c.prompt, " ".join(reversed(c.answer.split())))
    # the training answers of `distinct` are not one fixed order
    firsts = {example(ALL, "target", i, "distinct").answer.split()[0] for i in range(20)}
    assert len(firsts) > 5


def test_shuffle_and_merge_accept_every_valid_order():
    e = example(ALL, "eval", 2, "shuffle")
    groups = " ".join(e.answer.split()).split(" | ")
    body = e.prompt.split(" : ", 1)[1]
    assert valid(e.prompt, body)  # the prompt's own order is one valid answer
    assert valid(e.prompt, " | ".join(" ".join(reversed(g.split())) for g in groups))
    assert not valid(e.prompt, " | ".join(reversed(groups)))  # groups stay in order
    assert not valid(e.prompt, " | ".join(groups[:-1]))
    m = example(ALL, "eval", 2, "merge")
    words = m.prompt.split()[2:]
    a, b = words[:words.index("|")], words[words.index("|") + 1:]
    assert valid(m.prompt, " ".join(a + b)) and valid(m.prompt, " ".join(b + a))
    assert valid(m.prompt, " ".join(w for p in zip(a, b) for w in p))
    assert not valid(m.prompt, " ".join(a[::-1] + b)) and not valid(m.prompt, " ".join(a + b[:-1]))
    # the training answers are random riffles: not always the same list first
    firsts = {example(ALL, "target", i, "merge").answer.split()[0] in
              example(ALL, "target", i, "merge").prompt.split(" | ")[0] for i in range(20)}
    assert firsts == {True, False}


def test_family_mix_follows_weights():
    w = WorldConfig(families=(FamilySpec("copy", 3.0), FamilySpec("reverse", 1.0)))
    fams = [e.family for e in examples(w, "target", 400)]
    assert 0.65 < fams.count("copy") / 400 < 0.85
    only = examples(w, "target", 50, weights={"reverse": 1.0})
    assert {e.family for e in only} == {"reverse"}


def test_bad_config_and_prompts_are_one_line():
    with pytest.raises(DraftlabError, match="min_answer_tokens"):
        WorldConfig(families=(FamilySpec("copy", 1.0, (10, 20)),))
    with pytest.raises(DraftlabError, match="unknown task family"):
        WorldConfig(families=(FamilySpec("add"),))
    with pytest.raises(DraftlabError, match="alphabet"):
        WorldConfig(families=(FamilySpec("interleave", 1.0, (24, 32)),), alphabet=40)
    with pytest.raises(DraftlabError, match="unknown keys"):
        WorldConfig.from_dict({"alphabett": 3})
    with pytest.raises(DraftlabError, match="not in this toy world"):
        examples(WorldConfig(families=(FamilySpec("copy"),)), "eval", 1, family="reverse")
    with pytest.raises(DraftlabError, match="not a toy-world prompt"):
        family_of("add : 1 2")
    assert not valid("copy : a b", "a b c") and not FAMILIES["copy"].valid("reverse : a b", "a b")


def test_swap_accepts_each_pair_in_either_order_and_nothing_else():
    e = example(ALL, "eval", 5, "swap")
    body = e.prompt.split()[2:]
    assert len(body) % 2 == 0 and e.valid(e.answer) and valid(e.prompt, " ".join(body))
    flipped = [w for i in range(0, len(body), 2) for w in body[i:i + 2][::-1]]
    assert valid(e.prompt, " ".join(flipped))
    assert not valid(e.prompt, " ".join(body[1:] + body[:1]))  # a symbol leaves its pair
    assert not valid(e.prompt, " ".join(body[:-2]))
    # the training answers flip pairs at random: both orders of a first pair occur
    firsts = {example(ALL, "target", i, "swap").answer.split()[0] == example(ALL, "target", i, "swap").prompt.split()[2]
              for i in range(40)}
    assert firsts == {True, False}


def test_mark_accepts_either_mark_after_each_symbol_and_nothing_else():
    from draftlab.toy.tasks import MARK_P, MARKS

    e = example(ALL, "eval", 7, "mark")
    body = e.prompt.split()[2:]
    assert e.valid(e.answer) and e.answer.split()[0::2] == body
    assert valid(e.prompt, " ".join(w for x in body for w in (x, MARKS[1])))
    assert not valid(e.prompt, " ".join(w for x in body for w in (x, "|")))  # not a mark
    assert not valid(e.prompt, " ".join(w for x in body[::-1] for w in (x, MARKS[0])))
    assert not valid(e.prompt, " ".join(body))
    marks = [w for i in range(200) for w in example(ALL, "target", i, "mark").answer.split()[1::2]]
    assert abs(marks.count(MARKS[0]) / len(marks) - MARK_P) < 0.03  # 5,000+ draws: 4 standard errors


def test_fill_is_mark_with_a_blank_after_each_symbol_so_each_answer_token_sits_at_one_distance_from_its_source():
    from draftlab.toy.tasks import ENTRY_END, MARKS

    e = example(ALL, "eval", 3, "fill")
    body, answer = e.prompt.split()[2:], e.answer.split()
    assert body[1::2] == [ENTRY_END] * len(answer[0::2]) and body[0::2] == answer[0::2]
    assert all(a == b or (i % 2 and a in MARKS and b == ENTRY_END) for i, (a, b) in enumerate(zip(answer, body)))
    assert valid(e.prompt, " ".join(w for x in body[0::2] for w in (x, MARKS[1])))
    assert not valid(e.prompt, " ".join(body))  # the blanks left unfilled
    assert not valid(" ".join(["fill", ":", *body[:-1]]), e.answer)  # the last blank missing from the prompt
    assert not valid(" ".join(["fill", ":", *body[0::2]]), e.answer)  # no blanks: that is `mark`'s prompt


def test_flip_is_swap_with_marked_pairs():
    from draftlab.toy.tasks import LIST_SEP

    e = example(ALL, "eval", 5, "flip")
    body, answer = e.prompt.split()[2:], e.answer.split()
    assert body[2::3] == answer[2::3] == [LIST_SEP] * (len(body) // 3) and len(answer) == len(body) >= 50
    assert all({answer[i], answer[i + 1]} == {body[i], body[i + 1]} for i in range(0, len(body), 3))
    assert valid(e.prompt, " ".join(body))  # every pair as written is one of the valid answers
    flipped = [w for i in range(0, len(body), 3) for w in [body[i + 1], body[i], *body[i + 2:i + 3]]]
    assert valid(e.prompt, " ".join(flipped))
    assert not valid(e.prompt, " ".join(w for w in body if w != LIST_SEP))  # the marks left out
    assert not valid(e.prompt, " ".join(body[1:2] + body[0:1] + body[3:4] + body[2:3] + body[4:]))  # a mark moved
    assert not valid(e.prompt, " ".join(body[3:] + [LIST_SEP] + body[:2]))  # pairs out of order
    firsts = {example(ALL, "target", i, "flip").answer.split()[0] == example(ALL, "target", i, "flip").prompt.split()[2]
              for i in range(40)}
    assert firsts == {True, False}


def test_drift_applies_each_mark_to_its_symbol():
    """`x +` is written twice, `x -` left out, the rest copied; the marks sit apart and never on the first symbol, their
    number varies per prompt; a wrong answer (a stutter written once, a skipped symbol kept, two swapped) is refused."""
    drift = FAMILIES["drift"]
    assert drift.solve("a b + c d - e".split()) == "a b b c e".split()
    counts = set()
    for e in examples(ALL, "eval", 40, family="drift"):
        body = e.prompt.split()[2:]
        marks = [i for i, w in enumerate(body) if w in ("+", "-")]
        counts.add(len(marks))
        assert body[0] not in ("+", "-") and all(j - i > 2 for i, j in zip(marks, marks[1:]))  # a symbol between
        assert 6 <= len(marks) <= 18 and e.valid(e.answer) and len(e.answer.split()) >= 48
        ans = e.answer.split()
        st = next(i for i in marks if body[i] == "+")
        once = list(ans)
        once.remove(body[st - 1])  # the stutter written once
        assert not e.valid(" ".join(once))
        assert not e.valid(" ".join(ans[:3] + ans[4:5] + ans[3:4] + ans[5:])) or ans[3] == ans[4]
    assert len(counts) > 3  # one drift level per prompt, many levels over the suite
    assert not valid("drift : + a b", "a b") and not valid("drift : a + - b", "a a")


def test_capslock_writes_each_letter_in_the_locks_case():
    """An upper-case letter toggles the lock (it starts off); every letter is written in the lock's case; the number of
    toggles varies per prompt; a wrong case anywhere, or a body that is not letters, is refused."""
    caps = FAMILIES["capslock"]
    assert caps.solve("a b C d e F g".split()) == "a b C D E f g".split()
    assert caps.solve("A B".split()) == "A b".split()  # a second toggle turns it off again
    counts = set()
    for e in examples(ALL, "eval", 40, family="capslock"):
        body, ans = e.prompt.split()[2:], e.answer.split()
        toggles = sum(w.isupper() for w in body)
        counts.add(toggles)
        assert 6 <= toggles <= 18 and 56 <= len(body) <= 64 and e.valid(e.answer)
        assert [w.lower() for w in ans] == [w.lower() for w in body]  # the letters at one fixed distance
        wrong = list(ans)
        wrong[-1] = wrong[-1].swapcase()
        assert not e.valid(" ".join(wrong))
    assert len(counts) > 3  # one toggle rate per prompt, many over the suite
    assert not valid("capslock : a 1 b", "a 1 b") and not valid("capslock : a B", "a B b")
    with pytest.raises(DraftlabError, match="capslock needs the 52 letters"):
        WorldConfig(families=(FamilySpec("capslock", 1.0, (48, 50), (2, 4)),), alphabet=40)


def test_pairfill_writes_two_equal_marks_after_each_symbol():
    for e in examples(ALL, "eval", 20, family="pairfill"):
        body, ans = e.prompt.split()[2:], e.answer.split()
        assert body[1::3] == body[2::3] == [";"] * (len(body) // 3) and e.valid(e.answer)
        flipped = {"+": "-", "-": "+"}
        assert e.valid(" ".join(flipped.get(w, w) for w in ans))  # the other mark, in pairs: valid too
        broken = list(ans)
        broken[2] = flipped[broken[2]]  # the first pair unequal
        assert not e.valid(" ".join(broken))
