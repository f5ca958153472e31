"""The plain prompt format a tokenizer without a chat template gets (unsloth_grpo.models.prompt_format)."""

from __future__ import annotations

import pytest

from unsloth_grpo.models.tokenizer import prepare_tokenizer
from unsloth_grpo.models.builtin import CHATML_TEMPLATE, build_tokenizer
from unsloth_grpo.models.prompt_format import PLAIN_TEMPLATE

CHAT = [{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture(scope="module")
def base_tokenizer(tmp_path_factory):
    """The tiny tokenizer without its chat template: a base model's, as far as prompts go."""
    tok = build_tokenizer(tmp_path_factory.mktemp("tok"))
    tok.chat_template = None
    return tok


def test_a_tokenizer_without_a_template_gets_the_plain_format_and_one_with_a_template_keeps_it(base_tokenizer,
                                                                                                tmp_path):
    tok = prepare_tokenizer(base_tokenizer)
    assert tok.chat_template == PLAIN_TEMPLATE
    assert tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True) == \
        "Answer with a number.\n\nQuestion: What is 2 + 3?\nAnswer:"
    chat = build_tokenizer(tmp_path / "chat")
    assert prepare_tokenizer(chat).chat_template == CHATML_TEMPLATE


def test_an_answer_ends_with_the_eos_and_the_prompt_is_a_prefix_of_the_conversation(base_tokenizer):
    """What TRL's prompt/completion SFT needs: the completion's tokens follow the prompt's, and end with the
    eos the generation stops on (the warm-up teaches it)."""
    tok = prepare_tokenizer(base_tokenizer)
    prompt = tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    full = tok.apply_chat_template(CHAT + [{"role": "assistant", "content": "5"}], tokenize=False)
    assert full == prompt + " 5" + tok.eos_token + "\n\n"
    ids = tok(full, add_special_tokens=False).input_ids
    assert ids[:len(tok(prompt, add_special_tokens=False).input_ids)] == tok(prompt, add_special_tokens=False).input_ids
    assert tok.eos_token_id in ids


def test_a_turn_the_plain_format_has_no_place_for_is_refused(base_tokenizer):
    tok = prepare_tokenizer(base_tokenizer)
    with pytest.raises(Exception, match="system, user and assistant turns only, not tool"):
        tok.apply_chat_template(CHAT + [{"role": "tool", "content": "42"}], tokenize=False)


def test_check_counts_a_base_models_prompts_in_the_plain_format_instead_of_crashing(tmp_path):
    """--check counts prompt tokens with the model's tokenizer before any load: for a model without a chat
    template (builtin:gemma3-270m) that raised transformers' 'chat_template is not set' (issue 53). It counts
    them as the run renders them, in the plain format."""
    from unsloth_grpo.data import prompt_lengths
    from unsloth_grpo.recipes.gsm8k import RECIPE
    from unsloth_grpo.tasks import get_task
    from unsloth_grpo.training.checks import rows_to_train

    folder = tmp_path / "base-model"
    tok = build_tokenizer(tmp_path / "tok")
    tok.chat_template = None  # a base model's, saved without a template (the fixture's is made ready in place)
    tok.save_pretrained(str(folder))
    assert "chat_template" not in (folder / "tokenizer_config.json").read_text()
    cfg = RECIPE.resolve(preset="smoke", overrides=[f"model.name={folder}"])
    rows = get_task(cfg.task).load(cfg)
    lengths = sorted(prompt_lengths(rows, prepare_tokenizer(tok)))
    limit = lengths[len(lengths) // 2]
    cfg = RECIPE.resolve(preset="smoke", overrides=[f"model.name={folder}", f"data.max_prompt_tokens={limit}"])
    kept, notes = rows_to_train(cfg, rows)
    assert kept == sum(n <= limit for n in lengths) < len(rows), (kept, limit, notes)
