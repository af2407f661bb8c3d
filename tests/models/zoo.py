"""The model zoo: tiny configurations of real models, random initialisation, seeded synthetic batches.

Nothing is downloaded: transformers models are built from their configuration classes. Dropout is
0 everywhere (configuration dropouts, stochastic depth), so a step is a deterministic function of the
weights and the batch and the CPU and `xla` runs compute the same function. transformers' default
attention implementation is "sdpa"; cases ending in `_eager` select its "eager" attention instead.
"""

from __future__ import annotations

import contextlib
import logging

import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.models import cnns
from tests.models.harness import Case

VOCAB = 64


def _gen(step: int, salt: int) -> torch.Generator:
    return torch.Generator().manual_seed(1000 * step + salt)


def _ids(step: int, salt: int, *shape: int, high: int = VOCAB) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=_gen(step, salt))


def _normal(step: int, salt: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(step, salt))


def _hf_loss(model, batch):
    return model(**batch).loss


def _hf_logits(model, batch):
    return model(**batch).logits


# ---------------------------------------------------------------------------------------------
# transformers
# ---------------------------------------------------------------------------------------------

def gpt2(attn: str = "sdpa"):
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=32, bos_token_id=0, eos_token_id=1,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation=attn))


def _causal_batch(step: int) -> dict:
    ids = _ids(step, 1, 2, 16)
    return {"input_ids": ids, "labels": ids}


def bert(attn: str = "sdpa"):
    from transformers import BertConfig, BertForMaskedLM

    return BertForMaskedLM(BertConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64, vocab_size=VOCAB,
        max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0,
        attn_implementation=attn))


def _masked_batch(step: int) -> dict:
    ids = _ids(step, 1, 2, 16)
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 12:] = 0  # a padded sequence: the attention mask reaches the scores
    labels = torch.where(torch.rand(2, 16, generator=_gen(step, 2)) < 0.3, ids, torch.full_like(ids, -100))
    labels[0, 0] = ids[0, 0]  # at least one target
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def t5(attn: str = "sdpa"):
    from transformers import T5Config, T5ForConditionalGeneration

    return T5ForConditionalGeneration(T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=2,
        relative_attention_num_buckets=8, dropout_rate=0.0, pad_token_id=0, eos_token_id=1,
        decoder_start_token_id=0, attn_implementation=attn))


def _seq2seq_batch(step: int) -> dict:
    return {"input_ids": _ids(step, 1, 2, 12), "labels": _ids(step, 2, 2, 8)}


def llama(attn: str = "sdpa"):
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32, bos_token_id=0, eos_token_id=1, pad_token_id=2,
        attn_implementation=attn))


def vit(attn: str = "sdpa"):
    from transformers import ViTConfig, ViTForImageClassification

    return ViTForImageClassification(ViTConfig(
        image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=10,
        attn_implementation=attn))


def _image_batch(step: int, size: int = 16) -> dict:
    return {"pixel_values": _normal(step, 1, 4, 3, size, size), "labels": _ids(step, 2, 4, high=10)}


def whisper(attn: str = "sdpa"):
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    return WhisperForConditionalGeneration(WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=8, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=16,
        max_target_positions=16, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, suppress_tokens=None,
        begin_suppress_tokens=None, attn_implementation=attn))


def _audio_batch(step: int) -> dict:
    # The encoder's two convolutions halve 32 frames to its 16 source positions.
    return {"input_features": _normal(step, 1, 2, 8, 32), "labels": _ids(step, 2, 2, 8)}


# transformers' mask builder asks `padding_mask.all()` (masking_utils._ignore_bidirectional_mask_sdpa)
# to drop an all-ones mask: data-dependent control flow, a host read and a second graph every step, on
# PyTorch/XLA as here. The cases keep the padded batch users have, and name the read.
PADDING_MASK_READ = {"aten::_local_scalar_dense": "transformers reads padding_mask.all() to skip an all-ones mask"}


def _hf(name: str, build, batch, attn: str, **kwargs) -> Case:
    suffix = "" if attn == "sdpa" else f"_{attn}"
    return Case(f"{name}{suffix}", lambda: build(attn), batch, _hf_loss, **kwargs)


# GPT-2 has no `loss_type`, so transformers logs a warning from `loss_function` on each trace: under
# torch.compile, a logging call is a graph break (TorchDynamo cannot trace it), in transformers' code.
LOSS_TYPE_WARNING = {"DynamoGraphBreak": "transformers logs 'loss_type=None was set' in loss_function (torch.compile)"}

TRANSFORMERS = {c.name: c for attn in ("sdpa", "eager") for c in (
    _hf("gpt2", gpt2, _causal_batch, attn, fallbacks=LOSS_TYPE_WARNING),
    _hf("bert", bert, _masked_batch, attn, fallbacks=PADDING_MASK_READ, graphs=2),
    _hf("t5", t5, _seq2seq_batch, attn),
    _hf("llama", llama, _causal_batch, attn),
    _hf("vit", vit, _image_batch, attn),
    _hf("whisper", whisper, _audio_batch, attn),
)}


def mixtral():
    from transformers import MixtralConfig, MixtralForCausalLM

    return MixtralForCausalLM(MixtralConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=32,
        output_router_logits=True, router_aux_loss_coef=0.01))


def _moe_loss(model, batch):
    # Off the CPU transformers' experts call grouped_mm (and histc of integers for the load-balancing loss);
    # grouped_mm has no float64 kernel, so the float64 oracle computes the experts with batched products.
    if next(model.parameters()).dtype == torch.float64:
        model.config._experts_implementation = "batched_mm"
    return model(**batch).loss


def mamba():
    from transformers import MambaConfig, MambaForCausalLM

    return MambaForCausalLM(MambaConfig(vocab_size=VOCAB, hidden_size=32, state_size=8, num_hidden_layers=2,
                                        expand=2, conv_kernel=4, use_mambapy=False))


# Mixture of experts and a state-space model: no attention implementation to vary.
TRANSFORMERS.update({c.name: c for c in (
    Case("mixtral", mixtral, _causal_batch, _moe_loss),
    Case("mamba", mamba, _causal_batch, _hf_loss),
)})

# ---------------------------------------------------------------------------------------------
# torch.nn attention modules
# ---------------------------------------------------------------------------------------------

class EncoderLM(nn.Module):
    """Embedding → nn.TransformerEncoder (post-norm, ReLU) → vocabulary head, with a padding mask."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 32)
        layer = nn.TransformerEncoderLayer(32, 2, 64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, VOCAB)

    def forward(self, ids, padding):
        return self.head(self.encoder(self.emb(ids), src_key_padding_mask=padding))


class DecoderLM(nn.Module):
    """Embedding → nn.TransformerDecoder (pre-norm, GELU, causal) over a memory → vocabulary head."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 32)
        layer = nn.TransformerDecoderLayer(32, 2, 64, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.decoder = nn.TransformerDecoder(layer, 2)
        self.head = nn.Linear(32, VOCAB)

    def forward(self, ids, memory):
        causal = nn.Transformer.generate_square_subsequent_mask(ids.shape[1], device=ids.device)
        return self.head(self.decoder(self.emb(ids), memory, tgt_mask=causal, tgt_is_causal=True))


class CrossAttention(nn.Module):
    """nn.MultiheadAttention with distinct key and value widths, a key padding mask and its weights."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(32, 4, batch_first=True, kdim=24, vdim=16)

    def forward(self, query, key, value, padding):
        return self.attn(query, key, value, key_padding_mask=padding, need_weights=True)


def _lm_loss(logits, ids):
    return F.cross_entropy(logits.flatten(0, 1), ids.flatten())


def _encoder_batch(step: int) -> dict:
    padding = torch.zeros(2, 12, dtype=torch.bool)
    padding[1, 9:] = True
    return {"ids": _ids(step, 1, 2, 12), "padding": padding}


def _decoder_batch(step: int) -> dict:
    return {"ids": _ids(step, 1, 2, 10), "memory": _normal(step, 2, 2, 7, 32)}


def _attention_batch(step: int) -> dict:
    padding = torch.zeros(2, 7, dtype=torch.bool)
    padding[0, 5:] = True
    return {"query": _normal(step, 1, 2, 5, 32), "key": _normal(step, 2, 2, 7, 24),
            "value": _normal(step, 3, 2, 7, 16), "padding": padding}


def _attention_loss(model, batch):
    out, weights = model(**batch)
    return out.square().mean() + weights.square().mean()


NN_ATTENTION = {c.name: c for c in (
    Case("transformer_encoder", EncoderLM, _encoder_batch, lambda m, b: _lm_loss(m(**b), b["ids"]),
         optimizer="sgd"),
    Case("transformer_decoder", DecoderLM, _decoder_batch, lambda m, b: _lm_loss(m(**b), b["ids"])),
    Case("multihead_attention", CrossAttention, _attention_batch, _attention_loss),
)}


# ---------------------------------------------------------------------------------------------
# Recurrent networks: two layers, bidirectional, batch_first; padded or packed sequences
# ---------------------------------------------------------------------------------------------

LENGTHS = (6, 4, 2)


def _rnn_batch(step: int) -> dict:
    return {"x": _normal(step, 1, len(LENGTHS), max(LENGTHS), 8)}


def _rnn_loss(packed: bool):
    def loss(model, batch):
        x = batch["x"]
        if packed:
            seq = nn.utils.rnn.pack_padded_sequence(x, torch.tensor(LENGTHS), batch_first=True)
            out, _ = model(seq)
            out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
        else:
            out, _ = model(x)
        return out.square().mean()

    return loss


def _rnn(kind: str):
    return lambda: getattr(nn, kind)(8, 16, num_layers=2, bidirectional=True, batch_first=True)


RNNS = {c.name: c for kind in ("LSTM", "GRU", "RNN") for packed in (False, True) for c in (
    Case(f"{kind.lower()}{'_packed' if packed else ''}", _rnn(kind), _rnn_batch, _rnn_loss(packed)),
)}


# ---------------------------------------------------------------------------------------------
# CNNs (torchvision's definitions, tests/models/cnns.py)
# ---------------------------------------------------------------------------------------------

def _cnn_batch(step: int) -> dict:
    return {"x": _normal(step, 1, 4, 3, 32, 32), "y": _ids(step, 2, 4, high=10)}


def _cnn_loss(model, batch):
    return F.cross_entropy(model(batch["x"]), batch["y"])


def _cnn_output(model, batch):
    return model(batch["x"])


CNNS = {c.name: c for c in (
    Case("resnet", cnns.TinyResNet, _cnn_batch, _cnn_loss, _cnn_output),
    Case("mobilenet_v3", cnns.TinyMobileNetV3, _cnn_batch, _cnn_loss, _cnn_output),
    Case("efficientnet", cnns.TinyEfficientNet, _cnn_batch, _cnn_loss, _cnn_output),
)}

ALL = {**TRANSFORMERS, **NN_ATTENTION, **RNNS, **CNNS}

# What `make test` runs (about 45 s on two cores: each case compiles two graphs); the rest is marked
# slow. Transformers' default attention and a tie kept through training (GPT-2), SGD with momentum and
# a key padding mask (the encoder), nn.MultiheadAttention, BatchNorm with both residual blocks (ResNet).
# Left to -m slow, with what covers the same code paths by default: BERT's padded batch (the encoder's
# padding mask, GPT-2 for transformers' sdpa path); T5's 4-way tie (test_tied_weights moves T5 through
# to/deepcopy/load_state_dict/save, GPT-2 trains with its tie); the LSTM and the packed GRU
# (tests/runtime/test_rnn.py: 2-layer bidirectional steps, LSTM and packed GRU training against eager
# CPU); MobileNetV3's depthwise convolutions and hard activations (the OpInfo subset's conv2d samples
# with groups = channels, hardswish, hardsigmoid, forward and backward).
DEFAULT = frozenset({"gpt2", "transformer_encoder", "multihead_attention", "resnet"})


def marks(name: str):
    """pytest marks of a zoo case: slow unless it is in DEFAULT."""
    import pytest

    return () if name in DEFAULT else pytest.mark.slow


# How a case runs through torch.compile differently from the lazy path, and why: TorchDynamo's view of its code.
COMPILED_CHANGES = {
    # A packed sequence's batch sizes are read as Python numbers inside nn.LSTM/GRU/RNN (data-dependent):
    # TorchDynamo breaks the graph there, as it must.
    **{name: {"fallbacks": {**ALL[name].fallbacks,
                            "DynamoGraphBreak": "packed sequences read their batch sizes as Python numbers"}}
       for name in ALL if name.endswith("_packed")},
    # Under torch.compile transformers calls grouped_mm for bfloat16 experts only; in float32 its fallback
    # loops over the experts with their token counts as Python numbers.
    "mixtral": {"fallbacks": {"DynamoGraphBreak": "transformers' expert loop for non-bfloat16 weights under "
                                                  "torch.compile reads each expert's token count"}},
}


# ---------------------------------------------------------------------------------------------
# Remedies for graph breaks
# ---------------------------------------------------------------------------------------------

def _loss_type_set(model) -> contextlib.AbstractContextManager:
    model.loss_type = "ForCausalLM"
    return contextlib.nullcontext()


def _logging_call_ignored(model) -> contextlib.AbstractContextManager:
    import torch._dynamo

    # transformers adds warning_once to logging.Logger; TorchDynamo then skips it in compiled code.
    return torch._dynamo.config.patch(ignore_logging_functions={logging.Logger.warning_once})


# The remedies the graph-break advice gives for a case's break under torch.compile (xladev/analysis/compile_rules.py,
# docs/compile.md), by case: (label, remedy). A remedy changes the model, and returns the context in which the case
# is then compiled and run. tests/models/test_compiled.py checks that each removes the break; bench_compile.py
# times each.
BREAK_REMEDIES = {"gpt2": (("loss_type set", _loss_type_set), ("logging call ignored", _logging_call_ignored))}
