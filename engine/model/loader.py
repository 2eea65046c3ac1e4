"""Load a Qwen3-Next checkpoint in HF layout: config.json + safetensors (single or sharded).

Tensor names are those of transformers' `Qwen3NextForCausalLM`. Routed experts come either
per expert (`mlp.experts.{e}.gate_proj.weight`, `up_proj`, `down_proj`, as save_pretrained
writes them) or fused (`mlp.experts.gate_up_proj` [E, 2I, H], `mlp.experts.down_proj`
[E, H, I]); they go to the `ExpertProvider`, everything else into the module. Tensors of a
multi-token-prediction head (`mtp.*`) are skipped. Any other mismatch raises
`CheckpointError` naming the tensor and both shapes.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import torch
from torch import nn

from engine.errors import CheckpointError
from engine.model.config import ModelConfig
from engine.model.experts import ExpertProvider, ExpertWeights, ResidentExperts, input_major
from engine.model.moe import Router
from engine.model.qwen3_next import Qwen3NextForCausalLM

logger = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_EXPERT = re.compile(r"^model\.layers\.(\d+)\.mlp\.experts\.(.+)$")
_IGNORED = re.compile(r"^mtp\.")
_SHARED = re.compile(r"^model\.layers\.\d+\.mlp\.shared_expert(_gate)?\.")


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise CheckpointError(f"dtype: expected one of {list(DTYPES)}, found {dtype!r}")
    return DTYPES[dtype]


def load_model(
    path: str | Path,
    dtype: str | torch.dtype = "float32",
    device: str | torch.device = "cpu",
    experts: ExpertProvider | None = None,
) -> Qwen3NextForCausalLM:
    """Build the model from a checkpoint directory; experts go to `experts` (ResidentExperts by default)."""
    path = Path(path)
    torch_dtype = resolve_dtype(dtype)
    config = ModelConfig.from_file(path / "config.json")
    files = _tensor_files(path)
    experts = experts if experts is not None else ResidentExperts()
    with torch.device("meta"):
        model = Qwen3NextForCausalLM(config, experts)
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    state: dict[str, torch.Tensor] = {}
    expert_parts: dict[int, dict[str, torch.Tensor]] = {}
    from safetensors import safe_open

    for file, names in files.items():
        with safe_open(str(file), framework="pt", device="cpu") as f:
            held = set(f.keys())
            for name in names:
                if name not in held:
                    raise CheckpointError(
                        f"{path}: the index puts tensor '{name}' in {file.name}, which does not hold it"
                    )
                if _IGNORED.match(name):
                    continue
                if config.shared_expert_intermediate_size == 0 and _SHARED.match(name):
                    continue  # a zero-width shared expert adds nothing
                if config.tie_word_embeddings and name == "lm_head.weight":
                    continue  # tied: the head is the embedding
                m = _EXPERT.match(name)
                if m and config.is_moe_layer(int(m.group(1))):
                    expert_parts.setdefault(int(m.group(1)), {})[m.group(2)] = f.get_tensor(name)
                    continue
                if name not in expected:
                    raise CheckpointError(
                        f"{file.name}: unexpected tensor '{name}' "
                        f"(shape {list(f.get_slice(name).get_shape())}); the config "
                        f"({config.source}) has no such parameter"
                    )
                tensor = f.get_tensor(name)
                _check_shape(name, expected[name], tuple(tensor.shape), file)
                state[name] = tensor.to(device=device, dtype=torch_dtype)
    missing = sorted(set(expected) - set(state))
    if missing:
        shown = ", ".join(f"'{n}' {list(expected[n])}" for n in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise CheckpointError(f"{path}: missing tensor {shown}{more}")
    model.load_state_dict(state, strict=True, assign=True)
    _input_major(model)
    for layer in range(config.num_hidden_layers):
        if config.is_moe_layer(layer):
            _load_experts(config, layer, expert_parts.get(layer, {}), experts, torch_dtype, device, path)
    logger.info("loaded %s: %d tensors from %d file(s), dtype %s", path, len(state), len(files), torch_dtype)
    return model.eval()


def _input_major(model: Qwen3NextForCausalLM) -> None:
    """Every projection's weight stored input-major (`experts.input_major`), the layout the
    CPU's BLAS multiplies fastest; the modules still see [out, in] matrices."""
    for module in model.modules():
        if isinstance(module, (nn.Linear, Router)):
            module.weight = nn.Parameter(input_major(module.weight.detach()), requires_grad=False)


def _tensor_files(path: Path) -> dict[Path, list[str]]:
    """Which tensor names each safetensors file holds."""
    index = path / "model.safetensors.index.json"
    if index.exists():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as exc:
            raise CheckpointError(f"{index}: expected JSON with a 'weight_map', found {exc!r}") from None
        files: dict[Path, list[str]] = {}
        for name, file in weight_map.items():
            files.setdefault(path / file, []).append(name)
        for file in files:
            if not file.exists():
                raise CheckpointError(f"{index}: names shard '{file.name}', which does not exist")
        return files
    single = path / "model.safetensors"
    if not single.exists():
        raise CheckpointError(f"{path}: expected model.safetensors or model.safetensors.index.json, found neither")
    from safetensors import safe_open

    with safe_open(str(single), framework="pt") as f:
        return {single: list(f.keys())}


def _check_shape(name: str, expected: tuple[int, ...], found: tuple[int, ...], where: Path | str) -> None:
    if expected != found:
        raise CheckpointError(
            f"{Path(where).name}: tensor '{name}': expected shape {list(expected)}, found {list(found)}"
        )


def _load_experts(
    config: ModelConfig,
    layer: int,
    parts: dict[str, torch.Tensor],
    experts: ExpertProvider,
    dtype: torch.dtype,
    device: str | torch.device,
    path: Path,
) -> None:
    hidden, inter, num = config.hidden_size, config.moe_intermediate_size, config.num_experts
    prefix = f"model.layers.{layer}.mlp.experts"
    if "gate_up_proj" in parts or "down_proj" in parts:  # fused layout
        for key, fused_shape in (("gate_up_proj", (num, 2 * inter, hidden)), ("down_proj", (num, hidden, inter))):
            if key not in parts:
                raise CheckpointError(f"{path}: missing tensor '{prefix}.{key}' {list(fused_shape)}")
            _check_shape(f"{prefix}.{key}", fused_shape, tuple(parts[key].shape), path)
        leftover = sorted(set(parts) - {"gate_up_proj", "down_proj"})
        if leftover:
            raise CheckpointError(f"{path}: unexpected tensor '{prefix}.{leftover[0]}' beside the fused experts")
        for e in range(num):
            experts.load(
                layer,
                e,
                ExpertWeights(
                    gate_up=input_major(parts["gate_up_proj"][e].to(device=device, dtype=dtype)),  # [2I, H]
                    down=input_major(parts["down_proj"][e].to(device=device, dtype=dtype)),
                ),
            )  # [H, I]
        return
    shapes = {
        "gate_proj.weight": (inter, hidden),
        "up_proj.weight": (inter, hidden),
        "down_proj.weight": (hidden, inter),
    }
    for key in parts:
        expert, _, rest = key.partition(".")
        if not expert.isdigit() or int(expert) >= num or rest not in shapes:
            raise CheckpointError(
                f"{path}: unexpected tensor '{prefix}.{key}' (the config has "
                f"{num} experts with gate_proj, up_proj, down_proj)"
            )
    for e in range(num):
        for rest, shape in shapes.items():
            name = f"{e}.{rest}"
            if name not in parts:
                raise CheckpointError(f"{path}: missing tensor '{prefix}.{name}' {list(shape)}")
            _check_shape(f"{prefix}.{name}", shape, tuple(parts[name].shape), path)
        gate_up = torch.cat((parts[f"{e}.gate_proj.weight"], parts[f"{e}.up_proj.weight"]), dim=0)  # [2I, H]
        experts.load(
            layer,
            e,
            ExpertWeights(
                gate_up=input_major(gate_up.to(device=device, dtype=dtype)),  # [2I, H]
                down=input_major(parts[f"{e}.down_proj.weight"].to(device=device, dtype=dtype)),
            ),
        )  # [H, I]
