"""A reader's own model for the planner: a transformers config.json (a hub model page's file, or its
folder), its task resolved from transformers' own auto-model mappings, and the batch layout of the
study's architecture whose training step it shares. Every way the file can be wrong is one line
naming the file (ModelConfigError, a ValueError)."""

import json
from pathlib import Path

import torch

from ..archs.base import for_training
from ..choices import check_choice
from ..core.config import RunConfig
from .trace import BatchTemplate

# transformers' mapping of model types to a task's class, the study's architecture whose batch and
# step that task shares, and the task in words.
_TASKS = (("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "llama", "causal LM"),
          ("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "modernbert", "masked LM"),
          ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", "vit", "image classifier"))


class ModelConfigError(ValueError):
    """A config.json the planner cannot plan, said in one line that names the file."""


def read_config_file(path: str) -> tuple[Path, dict]:
    """(the file, its JSON object): a config.json, or a folder holding one."""
    given = Path(path)
    file = given / "config.json" if given.is_dir() else given
    if given.is_dir() and not file.is_file():
        raise ModelConfigError(f"{given}: the folder holds no config.json")
    if not file.is_file():
        raise ModelConfigError(f"{file}: no such file (give a model's config.json or its folder)")
    try:
        values = json.loads(file.read_text())
    except UnicodeDecodeError:
        raise ModelConfigError(f"{file}: not a text file (a config.json is JSON)") from None
    except json.JSONDecodeError as error:
        raise ModelConfigError(f"{file}: not JSON ({error})") from None
    if not isinstance(values, dict):
        raise ModelConfigError(f"{file}: a config.json holds one JSON object, got a {type(values).__name__}")
    return file, values


def task_classes(model_type: str) -> list[tuple[str, str, str]]:
    """[(class name, study architecture, task)] transformers offers for `model_type` in the planned tasks."""
    from transformers.models.auto import modeling_auto

    found = []
    for mapping, arch, task in _TASKS:
        names = getattr(modeling_auto, mapping).get(model_type, ())
        found += [(name, arch, task) for name in ((names,) if isinstance(names, str) else names)]
    return found


def resolve_task(file: Path, values: dict) -> tuple[str, str]:
    """(class name, study architecture): the class `architectures` names among the model type's
    classes for the planned tasks, else the model type's only one."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    model_type = values.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise ModelConfigError(f"{file}: no 'model_type' (transformers picks the config class by it, e.g. "
                               "\"llama\", \"gpt2\", \"bert\", \"vit\")")
    if model_type not in CONFIG_MAPPING_NAMES:
        raise ModelConfigError(f"{file}: model_type {model_type!r} is not one this transformers "
                               f"({transformers.__version__}) knows")
    offered = [entry for entry in task_classes(model_type) if hasattr(transformers, entry[0])]
    if not offered:
        raise ModelConfigError(f"{file}: model_type {model_type!r} has no causal LM, masked LM or image "
                               "classifier class in transformers: the planner plans those tasks")
    named = values.get("architectures") or []
    chosen = [entry for entry in offered if entry[0] in named]
    if not chosen and (named or len(offered) > 1):
        listed = ", ".join(f"{name} ({task})" for name, _, task in offered)
        given = f"'architectures' names {', '.join(map(str, named))}" if named else "no 'architectures'"
        raise ModelConfigError(f"{file}: {given}; model_type {model_type!r} offers {listed}: "
                               "set 'architectures' to one of them")
    name, arch, _ = (chosen or offered)[0]
    return name, arch


def load_model_config(path: str):
    """(transformers config for training, model class, study architecture) of a config.json, offline.
    The model is built once on the meta device (nothing allocated), so a config transformers cannot
    build (a negative size, say) fails here, in one line."""
    import transformers
    from transformers import AutoConfig

    file, values = read_config_file(path)
    class_name, arch = resolve_task(file, values)
    model_class = getattr(transformers, class_name)
    values = dict(values)
    try:
        config = for_training(AutoConfig.for_model(values.pop("model_type"), **values))
        with torch.device("meta"):
            model_class(config)
    except Exception as error:  # transformers' own checks, or torch's on the sizes
        reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ModelConfigError(f"{file}: transformers cannot build {class_name} from it: "
                               f"{type(error).__name__}: {reason}") from None
    return config, model_class, arch


# The training step a plan models: a reader's (transformers' Trainer, or a loop like it), or the study's.
STEPS = ("trainer", "gum")


def labels_path_loss(model, batch: dict):
    """The loss as a transformers Trainer step takes it: the model's own labels path (a causal LM
    shifts the labels and upcasts the logits to float there), the outputs dropped before backward.
    Its scale (the model's mean) changes no memory."""
    return model(**batch).loss


def model_config_template(config, arch: str, batch_size: int, seq_len: int, padded: bool = False,
                          step: str = "trainer") -> BatchTemplate:
    """The batch layout of the study's `arch`, at the model's own vocabulary or image size; a text
    batch without padding unless `padded` (a real step then skips the causal mask); the loss taken
    as `step` takes it."""
    check_choice("step", step, STEPS)
    loss = labels_path_loss if step == "trainer" else None
    if arch == "vit":
        size = config.image_size
        rows = (("pixel_values", (config.num_channels, size, size), torch.float32), ("labels", (), torch.int64))
        return BatchTemplate(rows, batch_size, None, step_loss=loss)
    rows = tuple((key, (seq_len,), torch.int64) for key in ("input_ids", "attention_mask", "labels"))
    return BatchTemplate(rows, batch_size * seq_len, None, unpadded=not padded, step_loss=loss)


def plan_model_config(path: str, seq_len: int = 512, padded: bool = False, step: str = "trainer", **run) -> tuple:
    """(RunConfig, template, model maker) for a reader's config.json; `run` holds RunConfig fields;
    `padded`: its text batches hold padding; `step`: a Trainer's step or the study's (STEPS)."""
    from transformers.initialization import no_init_weights

    model_config, model_class, arch = load_model_config(path)
    config = RunConfig(arch=arch, **run)

    def make():
        with no_init_weights():
            return model_class(model_config)

    return config, model_config_template(model_config, arch, config.rank_batch_size, seq_len, padded, step), make
