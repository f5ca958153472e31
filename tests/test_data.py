import json
import re

import pytest

from unsloth_grpo.data import DataError, filter_long_prompts, load_qa_dataset
from unsloth_grpo.tasks.gsm8k import load_gsm8k
from unsloth_grpo.tasks.gsm8k import SYSTEM_PROMPT, clean_number, make_synthetic_problems, parse_gold


@pytest.mark.parametrize(
    "raw, gold",
    [
        ("She sold 48/2 = <<48/2=24>>24 clips.\n#### 72", "72"),
        ("#### 1,000", "1000"),
        ("#### -5", "-5"),
        ("#### 2.50", "2.5"),
        ("#### $18", "18"),
        ("#### 18.00", "18"),
        ("#### 0.5", "0.5"),
        ("#### .5", "0.5"),
        ("#### 1,234,567", "1234567"),
        ("#### 18.", "18"),
        ("#### -0", "0"),
        ("42", "42"),
        ("#### twelve", None),
        ("#### 1,00", None),
        ("no marker and no number", None),
    ],
)
def test_parse_gold(raw, gold):
    assert parse_gold(raw) == gold


def test_clean_number_handles_sign_and_currency_order():
    assert clean_number("$-5") == "-5"
    assert clean_number("-$5") == "-5"
    assert clean_number("+7") == "7"


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_load_gsm8k_reads_a_few_thousand_local_rows(tmp_path):
    rows = make_synthetic_problems(3000, seed=1)
    path = _write_jsonl(tmp_path / "gsm8k.jsonl", rows)
    ds = load_gsm8k(str(path))
    assert len(ds) == 3000
    assert ds.column_names == ["prompt", "answer"]
    for row, src in zip(ds, rows):
        assert row["prompt"][0] == {"role": "system", "content": SYSTEM_PROMPT}
        assert row["prompt"][1]["role"] == "user" and row["prompt"][1]["content"] == src["question"]
        assert row["answer"] == src["answer"].rsplit("####", 1)[1].strip().replace(",", "")
        float(row["answer"])  # a clean number for every row


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".json"])
def test_load_gsm8k_other_local_formats(tmp_path, suffix):
    import pandas as pd

    df = pd.DataFrame(make_synthetic_problems(20, seed=2))
    path = tmp_path / f"data{suffix}"
    {".csv": lambda: df.to_csv(path, index=False), ".parquet": lambda: df.to_parquet(path),
     ".json": lambda: df.to_json(path, orient="records")}[suffix]()
    ds = load_gsm8k(str(path))
    assert len(ds) == 20 and ds[0]["answer"] == parse_gold(df.answer[0])


def test_synthetic_source_is_deterministic_and_split_aware():
    a = load_gsm8k("synthetic", num_synthetic=10, seed=3)
    b = load_gsm8k("synthetic", num_synthetic=10, seed=3)
    test = load_gsm8k("synthetic", "test", num_synthetic=10, seed=3)
    assert a["answer"] == b["answer"] and a["prompt"] == b["prompt"]
    assert a["prompt"] != test["prompt"]


def test_missing_column_names_the_column_and_what_exists(tmp_path):
    path = _write_jsonl(tmp_path / "bad.jsonl", [{"question": "q", "solution": "#### 1"}])
    with pytest.raises(DataError, match=r"lacks column\(s\) answer; it has question, solution"):
        load_gsm8k(str(path))


def test_unparseable_gold_names_the_row(tmp_path):
    rows = make_synthetic_problems(5) + [{"question": "How many?", "answer": "#### many"}]
    path = _write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(DataError, match=r"(?s)1 malformed row.*line 6: cannot read a reference answer"):
        load_gsm8k(str(path))


def test_empty_dataset_and_missing_file(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("question,answer\n")
    with pytest.raises(DataError, match="is empty"):
        load_gsm8k(str(empty))
    with pytest.raises(DataError, match="does not exist"):
        load_gsm8k(str(tmp_path / "nope.jsonl"))
    with pytest.raises(DataError, match="unknown format"):
        (tmp_path / "x.txt").write_text("hi")
        load_gsm8k(str(tmp_path / "x.txt"))


def test_general_loader_with_column_mapping(tmp_path):
    path = tmp_path / "kb.csv"
    path.write_text("question,expert_answer\nWhat colour is the sky?,Blue\nWho wrote it?,Ann\n")
    ds = load_qa_dataset(str(path), answer_column="expert_answer", system_prompt="Use the handbook.")
    assert ds["answer"] == ["Blue", "Ann"]
    assert ds[0]["prompt"] == [
        {"role": "system", "content": "Use the handbook."},
        {"role": "user", "content": "What colour is the sky?"},
    ]


def test_long_prompts_are_dropped_with_a_report(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ds = load_gsm8k("synthetic", num_synthetic=30)
    texts = [tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in ds["prompt"]]
    lengths = sorted(len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts)
    assert lengths[0] > 20  # real token counts, not the size of a returned dict
    limit = lengths[-1] - 1  # drops at least the longest
    lines = []
    kept = filter_long_prompts(ds, tok, limit, log=lines.append)
    expected = sum(1 for n in lengths if n <= limit)
    assert len(kept) == expected < 30
    assert lines and f"dropped {30 - expected} of 30 prompts longer than {limit} tokens" in lines[0]
    with pytest.raises(DataError, match="every prompt is longer"):
        filter_long_prompts(ds, tok, 3, log=lines.append)


def test_synthetic_dataset_is_the_one_shared_offline_loader():
    from unsloth_grpo.data import split_seed, synthetic_dataset

    def make(n, seed):
        return [{"question": f"q{seed}-{i}", "answer": f"#### {i}", "extra": i} for i in range(n)]

    train = synthetic_dataset(make, split="train", seed=3, num_synthetic=10, limit=4, system_prompt="sys",
                              columns=("answer", "extra"), gold_parser=lambda a: a.split()[-1])
    assert train.column_names == ["prompt", "answer", "extra"] and len(train) == 4
    assert train[1] == {"prompt": [{"role": "system", "content": "sys"}, {"role": "user", "content": "q3-1"}],
                        "answer": "1", "extra": 1}
    test = synthetic_dataset(make, split="test", seed=3, num_synthetic=10, limit=None, system_prompt=None)
    assert len(test) == 10 and test[0]["prompt"] == [{"role": "user", "content": "q4-0"}]  # seed + 1
    assert (split_seed(3, "train"), split_seed(3, "validation")) == (3, 4)


def test_the_easy_offline_set_is_one_step_one_digit_and_its_held_out_sums_are_never_trained_on():
    import re

    from unsloth_grpo.data import DataError
    from unsloth_grpo.tasks.gsm8k import EXAMPLE_SYSTEM_PROMPT, load_gsm8k

    def sums(rows):
        return {tuple(re.search(r"<<(\d+)([+-])(\d+)=", r["answer"]).groups()) for r in rows}

    train = make_synthetic_problems(400, seed=0, subset="easy")
    test = make_synthetic_problems(200, seed=1, subset="easy", split="test")
    for r in train + test:
        a, op, b = re.search(r"<<(\d+)([+-])(\d+)=", r["answer"]).groups()
        assert int(b) <= 9 and (int(a) <= 9 if op == "+" else int(a) <= 19)
        assert parse_gold(r["answer"]) == str(int(a) + int(b) if op == "+" else int(a) - int(b))
    assert sums(train) and sums(test) and not sums(train) & sums(test)
    ds = load_gsm8k("synthetic", "test", subset="easy", num_synthetic=8, seed=3, system_prompt=EXAMPLE_SYSTEM_PROMPT)
    assert len(ds) == 8 and ds[0]["prompt"][0]["content"] == EXAMPLE_SYSTEM_PROMPT
    # the hub's default subset name keeps the usual mix; anything else is explained before loading
    assert load_gsm8k("synthetic", num_synthetic=5, seed=3)["answer"] == load_gsm8k(
        "synthetic", subset="main", num_synthetic=5, seed=3)["answer"]
    with pytest.raises(DataError, match="choose one of: main, easy"):
        load_gsm8k("synthetic", subset="eazy", num_synthetic=5)


#: The first two problems of the ``everyday`` set at generator seed 30,000.
FIRST_EVERYDAY = [
    {"question": "A ribbon is 5 cm long. Uma ties on another piece that is 2 cm long. How long is the ribbon now, in cm?",
     "answer": "5 + 2 = <<5+2=7>>7\n#### 7", "category": "addition", "template": "1"},
    {"question": "Tariq and Rosa have 13 stickers altogether, and 3 of the stickers are Tariq's. How many stickers "
                 "belong to Rosa?",
     "answer": "13 - 3 = <<13-3=10>>10\n#### 10", "category": "subtraction", "template": "3"},
]


def _five_word_runs(text: str) -> set[tuple[str, ...]]:
    """Every run of five words of ``text``, lower case, each number written N: what two phrasings share."""
    words = ["N" if w.isdigit() else w for w in re.findall(r"[a-z]+|\d+|[^\sa-z\d]", text.lower())]
    return {tuple(words[i:i + 5]) for i in range(len(words) - 4)}


def test_the_everyday_set_shares_no_phrasing_with_training_reworded_or_the_prompt():
    """Issue 52's third held-out set: none of its questions, templates or runs of five words is one of the
    training generator's (main, easy), reworded's, or the preset's worked examples'."""
    from unsloth_grpo.tasks.gsm8k import EVERYDAY_TEMPLATES, EXAMPLE_SYSTEM_PROMPT, REWORDED_TEMPLATES

    everyday = make_synthetic_problems(1200, seed=5, subset="everyday", split="test")
    others = (make_synthetic_problems(3000, seed=0) + make_synthetic_problems(3000, seed=0, subset="easy")
              + make_synthetic_problems(1000, seed=1, subset="easy", split="test")
              + make_synthetic_problems(3000, seed=0, subset="reworded", split="test")
              + make_synthetic_problems(3000, seed=0, subset="varied"))
    assert not {r["question"] for r in everyday} & {r["question"] for r in others}
    templates = {t for group in EVERYDAY_TEMPLATES.values() for t, _ in group}
    assert len(templates) == 12 and not templates & {t for group in REWORDED_TEMPLATES.values() for t in group}
    seen = set().union(*(_five_word_runs(r["question"]) for r in others), _five_word_runs(EXAMPLE_SYSTEM_PROMPT))
    assert [r["question"] for r in everyday if _five_word_runs(r["question"]) & seen] == []
    # every template and unit drawn; half additions, half subtractions; the easy set's held-out arithmetic
    assert {(r["category"], r["template"]) for r in everyday} == {(c, str(i)) for c in EVERYDAY_TEMPLATES for i in range(6)}
    assert [r["category"] for r in everyday[:4]] == ["addition", "subtraction", "addition", "subtraction"]
    test_sums = {re.search(r"<<(.+)=", r["answer"])[1] for r in make_synthetic_problems(2000, seed=1, subset="easy",
                                                                                          split="test")}
    assert {re.search(r"<<(.+)=", r["answer"])[1] for r in everyday} <= test_sums
    for words in ("minutes", " cm ", " kg ", "dollars", "on Monday", "on Tuesday", "in all", "together", "altogether"):
        assert any(words in r["question"] for r in everyday), words


def test_the_everyday_set_is_deterministic_and_its_first_problems_are_these():
    first = make_synthetic_problems(2, seed=30_000, subset="everyday", split="test")
    assert first == make_synthetic_problems(2, seed=30_000, subset="everyday", split="test")
    assert first == FIRST_EVERYDAY
    rows = load_gsm8k("synthetic", "test", subset="everyday", num_synthetic=2, seed=29_999)
    assert [p[-1]["content"] for p in rows["prompt"]] == [r["question"] for r in FIRST_EVERYDAY]
    assert list(rows["answer"]) == ["7", "10"] and list(rows["category"]) == ["addition", "subtraction"]


@pytest.mark.parametrize("subset", ["reworded", "everyday"])
def test_a_held_out_set_is_never_a_training_set(subset):
    with pytest.raises(DataError, match=f"data.subset='{subset}' is a held-out set.*eval --subset {subset}"):
        load_gsm8k("synthetic", "train", subset=subset, num_synthetic=4)
    assert len(load_gsm8k("synthetic", "test", subset=subset, num_synthetic=4)) == 4


# ------------------------------------------------------------------ one rule for "is this a local path"


@pytest.mark.parametrize("name, local", [
    ("./rows.jsonl", True), ("/data/model", True), ("~/models/qwen", True), ("rows.csv", True),
    ("rows.parquet", True), ("config.json", True), ("runs/2026/adapter", True), ("C:\\models\\qwen", True),
    ("openai/gsm8k", False), ("Qwen/Qwen2.5-1.5B-Instruct", False), ("gsm8k", False), ("builtin:tiny", False),
    ("synthetic", False),
])
def test_one_rule_says_which_names_are_local_paths(name, local, tmp_path, monkeypatch):
    from unsloth_grpo.data import looks_like_path

    monkeypatch.chdir(tmp_path)
    assert looks_like_path(name) is local
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "model").mkdir()
    assert looks_like_path("org/model")  # an owner/name that is a directory here is that directory


def test_every_reader_of_a_name_takes_a_missing_path_for_a_missing_path(tmp_path, monkeypatch):
    """A data source, a model to generate with, a model to plan for and a recipe's model: the same
    name is the same kind of thing to each, and a missing path is said to be missing, never looked up
    on the hub (``runs/2026/adapter`` used to be a hub id to the data and inference loaders)."""
    from unsloth_grpo.config import load_config
    from unsloth_grpo.hardware import architecture, backend
    from unsloth_grpo.hardware.doctor.recipe import recipe_problems
    from unsloth_grpo.hardware.profiles import PROFILES
    from unsloth_grpo.data import load_table

    monkeypatch.chdir(tmp_path)
    name = "runs/2026/adapter"
    with pytest.raises(DataError, match="does not exist"):
        load_table(name)
    with pytest.raises(backend.BackendError, match="does not exist"):
        backend.load_for_inference(name, log=lambda _m: None)
    with pytest.raises(architecture.UnknownModelError, match="does not exist"):
        architecture.load_model_config(name)
    cfg = load_config({"model": {"name": name}, "rewards": [{"name": "correctness"}]})
    [problem] = recipe_problems(cfg, profile=PROFILES["t4"], env={}, hub_probe=lambda *a: (False, "no"))
    assert "is a path that does not exist" in problem.message


def test_the_varied_training_set_is_easy_in_more_wordings_none_of_them_held_out():
    """Issue 52: GRPO's prompts in more than one wording. ``varied`` is ``easy``'s arithmetic (its split kept:
    no held-out sum or difference is trained on) in easy's own wording or one of VARIED_TEMPLATES, and shares no
    run of five words with the held-out wordings (reworded, everyday) or the preset's worked examples."""
    from unsloth_grpo.tasks.gsm8k import EXAMPLE_SYSTEM_PROMPT, VARIED_TEMPLATES

    varied = make_synthetic_problems(3000, seed=0, subset="varied")
    assert {(r["category"], r["template"]) for r in varied} == \
        {(c, t) for c in VARIED_TEMPLATES for t in ["easy", *map(str, range(len(VARIED_TEMPLATES[c])))]}
    new = [r for r in varied if r["template"] != "easy"]
    held = (make_synthetic_problems(3000, seed=0, subset="reworded", split="test")
            + make_synthetic_problems(3000, seed=0, subset="everyday", split="test"))
    seen = set().union(*(_five_word_runs(r["question"]) for r in held), _five_word_runs(EXAMPLE_SYSTEM_PROMPT))
    assert [r["question"] for r in new if _five_word_runs(r["question"]) & seen] == []
    # the same arithmetic as easy's, split the same way: training sums only in the train split, held-out in test
    sums = lambda rows: {re.search(r"<<(.+)=", r["answer"])[1] for r in rows}  # noqa: E731
    easy_test = sums(make_synthetic_problems(2000, seed=1, subset="easy", split="test"))
    assert not sums(varied) & easy_test
    assert sums(make_synthetic_problems(500, seed=2, subset="varied", split="test")) <= easy_test
    # each question states the worked answer's two numbers, in order
    for r in new[:200]:
        a, b = re.search(r"(\d+) [-+] (\d+)", r["answer"]).groups()
        assert re.findall(r"\d+", r["question"]) == [a, b], r["question"]
    assert make_synthetic_problems(5, seed=3, subset="varied") == make_synthetic_problems(5, seed=3, subset="varied")
