"""A tiny tokenizer built at test time (nothing downloaded), saved as a local folder.

One token per word `w0` ... `w{WORDS - 1}`; `<s>` is prepended to every encoded text (as Llama's
tokenizers do), and the chat template writes each message as `<|role|> content` and ends with
`<|assistant|>`. So a text of n words is n + 1 tokens; a chat of m messages with n words in all is
m + n + 1 tokens (the template's text is tokenized without special tokens).
"""

from __future__ import annotations

from pathlib import Path

WORDS = 64
SPECIAL = ["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_tokenizer(out: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordLevelTrainer(special_tokens=SPECIAL)
    tokenizer.train_from_iterator([" ".join(f"w{i}" for i in range(WORDS))], trainer=trainer)
    bos = tokenizer.token_to_id("<s>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", bos)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return out
