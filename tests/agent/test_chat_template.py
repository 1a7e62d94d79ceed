"""Stop markers read from chat templates (``agentlab.agent.providers.chat_template``)."""

from __future__ import annotations

from agentlab.agent.providers.chat_template import cut_at_markers, render_template, stop_markers

# Meta-Llama-3-8B-Instruct's tokenizer_config.json chat_template.
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
# Gemma's (google/gemma-2-2b-it): no system role, strict alternation, "model" for the assistant.
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)
# SmolLM2-135M-Instruct's (the embedded model): ChatML with a default system message.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
    "trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token + ' ' }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)


def test_llama3_template_stops_at_eot_id_and_the_next_header() -> None:
    markers = stop_markers(
        template=LLAMA3_TEMPLATE,
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
        eot_token="<|eot_id|>",
    )
    assert markers == ("<|eot_id|>", "<|start_header_id|>", "<|end_of_text|>")


def test_gemma_template_stops_at_end_of_turn_although_it_refuses_a_system_role() -> None:
    markers = stop_markers(
        template=GEMMA_TEMPLATE, bos_token="<bos>", eos_token="<eos>", eot_token="<end_of_turn>"
    )
    assert markers == ("<end_of_turn>", "<start_of_turn>", "<eos>")


def test_chatml_template_of_the_embedded_model_gives_the_chatml_markers() -> None:
    markers = stop_markers(
        template=SMOLLM2_TEMPLATE, bos_token="<|im_start|>", eos_token="<|im_end|>", eot_token="<|endoftext|>"
    )
    assert markers == ("<|im_end|>", "<|im_start|>", "<|endoftext|>")


def test_mistral_template_without_a_user_role_name_stops_at_eos_and_inst() -> None:
    assert stop_markers(template=MISTRAL_TEMPLATE, bos_token="<s>", eos_token="</s>") == ("</s>", "[INST]")


def test_a_template_that_cannot_be_rendered_leaves_the_vocabulary_tokens() -> None:
    assert stop_markers(template="{% for", eos_token="</s>", eot_token="") == ("</s>",)
    assert stop_markers(template=None, eos_token="<|im_end|>", eot_token="<|im_end|>") == ("<|im_end|>",)


def test_text_after_a_marker_is_cut_and_the_cut_is_reported() -> None:
    reply = "The answer is 391.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nThanks! And 2+2?"
    assert cut_at_markers(reply, ("<|eot_id|>", "<|start_header_id|>")) == ("The answer is 391.", True)
    assert cut_at_markers("391", ("<|eot_id|>",)) == ("391", False)
    # the earliest marker wins, whichever comes first in the list
    assert cut_at_markers("a<end_of_turn>b<eos>c", ("<eos>", "<end_of_turn>")) == ("a", True)


def test_render_template_renders_like_the_model_would_be_prompted() -> None:
    prompt = render_template(
        LLAMA3_TEMPLATE,
        [{"role": "user", "content": "What is 17 * 23?"}],
        bos_token="<|begin_of_text|>",
        add_generation_prompt=True,
    )
    assert prompt == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is 17 * 23?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
