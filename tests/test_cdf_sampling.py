"""Sampling one uniform number per row (training.cdf_sampling): the same distribution as
``torch.multinomial``, and inside ``model.generate`` the same loop as transformers' own."""

from __future__ import annotations

import pytest

from unsloth_grpo.training.cdf_sampling import decode, sample


def test_each_token_is_drawn_in_proportion_to_its_probability_and_a_zero_never():
    import torch

    torch.manual_seed(0)
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.2, 0.3, 0.0],
                          [3.0, 0.0, 1.0, 0.0, 0.0, 0.0],   # unnormalised: 3/4 and 1/4
                          [0.0, 0.0, 0.0, 0.0, 0.0, 2.0]])  # one entry, at the end
    n = 20_000
    draws = torch.stack([sample(probs) for _ in range(n)])  # [n, rows]
    expect = probs / probs.sum(-1, keepdim=True)
    for row in range(3):
        counts = torch.bincount(draws[:, row], minlength=6).double()
        assert counts[expect[row] == 0].sum() == 0  # a zero entry is never drawn
        sd = (n * expect[row] * (1 - expect[row])).sqrt()
        assert ((counts - n * expect[row]).abs() <= 5 * sd + 1e-9).all(), (row, counts.tolist())


def test_it_matches_multinomial_on_a_real_sized_vocabulary():
    """Over a vocabulary of SmolLM2's size with peaked rows, the two samplers' token frequencies agree."""
    import torch

    torch.manual_seed(1)
    logits = torch.randn(2, 49_152) * 4
    probs = torch.softmax(logits, -1)
    n = 4_000
    ours = torch.stack([sample(probs) for _ in range(n)])
    theirs = torch.multinomial(probs, n, replacement=True).T
    for row in range(2):
        top = probs[row].topk(5).indices
        for token in top:
            p = probs[row, token].item()
            sd = (2 * n * p * (1 - p)) ** 0.5  # the difference of two binomial counts
            gap = abs((ours[:, row] == token).sum().item() - (theirs[:, row] == token).sum().item())
            assert gap <= 5 * sd + 1, (row, token.item(), gap, sd)


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval(), tokenizer


def test_decoding_with_top_k_one_is_greedy_decoding_on_a_left_padded_batch(tiny):
    """With top_k=1 every draw must be the argmax: the loop's positions, masks, cache and stopping are
    transformers' own, whether the prompt starts fresh or from the shared prefill's cache."""
    import torch
    from transformers import GenerationConfig

    from unsloth_grpo.training.shared_prefill import shared_cache

    model, tokenizer = tiny
    enc = tokenizer(["What is 2 + 3?", "Name a colour, then a longer word please"], return_tensors="pt",
                    padding=True, padding_side="left")
    batch = {k: enc[k].repeat_interleave(3, dim=0) for k in ("input_ids", "attention_mask")}
    ids = dict(pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, max_new_tokens=12)
    greedy = GenerationConfig(do_sample=False, **ids)
    top1 = GenerationConfig(do_sample=True, top_k=1, temperature=0.7, **ids)
    with torch.no_grad():
        want = model.generate(**batch, generation_config=greedy)
        fresh = model.generate(**batch, generation_config=top1, custom_generate=decode)
        cache = shared_cache(model, {**batch, "generation_config": top1})
        shared = model.generate(**batch, generation_config=top1, custom_generate=decode, past_key_values=cache)
    assert torch.equal(fresh, want)
    assert torch.equal(shared, want)


def test_rows_that_end_are_padded_and_the_loop_stops_when_all_have(tiny):
    """A row that samples the end-of-sequence token is padded from then on, as transformers does, and
    generation stops before max_new_tokens once every row has ended."""
    import torch
    from transformers import GenerationConfig

    model, tokenizer = tiny
    enc = tokenizer(["hello"] * 6, return_tensors="pt")
    # make every token but two unlikely: the end token (to stop) and another one
    eos, other = tokenizer.eos_token_id, 5
    config = GenerationConfig(do_sample=True, max_new_tokens=40, pad_token_id=tokenizer.pad_token_id,
                              eos_token_id=eos, top_k=0, temperature=1.0)

    class TwoTokens:
        def __call__(self, input_ids, scores):
            out = torch.full_like(scores, float("-inf"))
            out[:, eos] = 0.0
            out[:, other] = 0.0
            return out

    from transformers import LogitsProcessorList

    torch.manual_seed(3)
    with torch.no_grad():
        out = model.generate(**enc, generation_config=config, custom_generate=decode,
                             logits_processor=LogitsProcessorList([TwoTokens()]))
    new = out[:, enc["input_ids"].shape[1]:]
    assert new.shape[1] < 40  # stopped early: each row ends with probability 1/2 a step
    for row in new.tolist():
        end = row.index(eos)  # every row ended
        assert set(row[:end]) <= {other}
        assert all(t == tokenizer.pad_token_id for t in row[end + 1:])


def test_calls_it_does_not_serve_go_to_transformers_own_loop(tiny):
    import torch
    from transformers import GenerationConfig

    model, tokenizer = tiny
    enc = tokenizer(["hello there"], return_tensors="pt")
    config = GenerationConfig(do_sample=True, max_new_tokens=6, pad_token_id=tokenizer.pad_token_id,
                              eos_token_id=tokenizer.eos_token_id, return_dict_in_generate=True, output_scores=True)
    torch.manual_seed(0)
    with torch.no_grad():
        want = model.generate(**enc, generation_config=config)
    torch.manual_seed(0)
    with torch.no_grad():
        got = model.generate(**enc, generation_config=config, custom_generate=decode)
    assert torch.equal(got.sequences, want.sequences) and len(got.scores) == len(want.scores)


def test_a_row_of_nan_stops_the_draw_naming_the_row_and_the_token(tiny):
    """``torch.multinomial`` refuses a row of NaN; the draw used to return a token for it, so a model whose
    logits went NaN kept generating (and training on noise)."""
    import torch
    from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

    from unsloth_grpo.training.cdf_sampling import NonFiniteProbabilities

    probs = torch.tensor([[0.2, 0.8], [float("nan"), 0.5], [0.0, 0.0]])
    with pytest.raises(NonFiniteProbabilities, match=r"2 of 3 rows \(rows \[1, 2\]\) are NaN or infinite"):
        sample(probs)

    class NanFromThirdToken(LogitsProcessor):
        def __init__(self):
            self.calls = 0

        def __call__(self, input_ids, scores):
            self.calls += 1
            return scores * float("nan") if self.calls >= 3 else scores

    model, tokenizer = tiny
    enc = tokenizer(["What is 2 + 3?"], return_tensors="pt")
    config = GenerationConfig(do_sample=True, max_new_tokens=8, pad_token_id=tokenizer.pad_token_id,
                              eos_token_id=tokenizer.eos_token_id)
    with torch.no_grad(), pytest.raises(NonFiniteProbabilities, match="at generated token 3: the model's logits "
                                                                     "went NaN"):
        model.generate(**enc, generation_config=config, custom_generate=decode,
                       logits_processor=LogitsProcessorList([NanFromThirdToken()]))


def test_a_run_whose_logits_went_nan_stops_naming_the_step_and_the_checkpoint(tmp_path):
    """The trainer loop turns the sampler's error (or torch.multinomial's own) into a stop that names the
    step whose completions were being generated and the checkpoint to resume from."""
    from types import SimpleNamespace

    from unsloth_grpo.recipes.gsm8k import RECIPE
    from unsloth_grpo.training import loop
    from unsloth_grpo.training.cdf_sampling import NonFiniteProbabilities
    from unsloth_grpo.training.checkpoint import finalize_checkpoint
    from unsloth_grpo.training.results import TrainingStopped

    cfg = RECIPE.resolve(preset="smoke", output_dir=str(tmp_path / "run"))
    staged = tmp_path / "run" / "checkpoint-4"
    staged.mkdir(parents=True)
    (staged / "adapter_model.safetensors").write_bytes(b"w")
    finalize_checkpoint(staged, tmp_path / "run", step=4)
    trainer = SimpleNamespace(state=SimpleNamespace(global_step=6))
    for exc in (NonFiniteProbabilities("rows [0] are NaN"),
                RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")):
        stop = loop._stopped(exc, trainer, cfg, resume_from=None, finalize=None, hint=None, log=print,
                             fresh_dir=False, main_process=True, decision=None)
        assert isinstance(stop, TrainingStopped) and stop.code == loop.DIVERGED_EXIT_CODE
        assert "while generating the completions of step 7: the training diverged" in str(stop)
        assert "checkpoint-4 was saved before; resume from it with a lower training.learning_rate" in str(stop)
