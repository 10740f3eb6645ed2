"""ViT: image classification, `ViTForImageClassification` (google/vit-base-patch16-224 at paper size)."""

from . import embedded
from .base import Architecture, DataShape, HubData, device_of, image_mosaic, validation_for_look
from .hub import both_splits, encode_images, split_rows


class ViT(Architecture):
    name = "vit"
    title = "ViT"
    kind = "vision"
    task = "image classification"
    model_class_name = "ViTForImageClassification"
    published_as = "google/vit-base-patch16-224"
    paper_parameters_m = 86.6
    tiny_shape = DataShape(image_size=28, channels=1)
    paper_shape = DataShape(image_size=224, channels=3)
    hub_data = HubData("uoft-cs/cifar10", None, None, "google/vit-base-patch16-224")
    lr_overrides = {"sgd": 0.05, "cgd": 0.01}
    reads_text = False

    def tiny_config(self):
        from transformers import ViTConfig

        return ViTConfig(image_size=28, patch_size=4, num_channels=1, hidden_size=128, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=4, num_labels=len(embedded.FASHION_LABELS))

    def paper_config(self):
        from transformers import ViTConfig

        return ViTConfig(image_size=224, patch_size=16, num_labels=1000)  # the defaults, with its 1000-class head

    def relevant_shape(self, shape: DataShape) -> DataShape:
        return DataShape(image_size=shape.image_size, channels=shape.channels)

    def describe_input(self, shape: DataShape) -> str:
        return f"{shape.image_size}x{shape.image_size}x{shape.channels}"

    def build_split(self, split: str, shape: DataShape) -> dict:
        import torch

        images, labels = embedded.images(split)
        return {"pixel_values": embedded.to_pixels(images, shape.image_size, shape.channels),
                "labels": torch.from_numpy(labels)}

    def encode_hub(self, splits, tokenizer, processor, shape, model_config, rows, eval_rows):
        train, val = both_splits(rows, eval_rows, lambda split, count: encode_images(
            split_rows(splits, split, count), processor, shape))
        return train, val, None

    def look(self, model, config, count: int = 12):
        """Validation images with predicted (true) labels, green where right."""
        import torch

        batch = validation_for_look(self, model, config, count)
        if batch is None:
            return None
        with torch.no_grad():
            predicted = model(pixel_values=batch["pixel_values"].to(device_of(model))).logits.argmax(-1).cpu()
        labels, right = embedded.FASHION_LABELS, predicted == batch["labels"]
        return image_mosaic([image[0] for image in batch["pixel_values"]],
                            [f"{labels[guess]}\n({labels[truth]})" for guess, truth in zip(predicted, batch["labels"])],
                            ["tab:green" if bool(ok) else "tab:red" for ok in right], columns=(count + 1) // 2,
                            suptitle=f"predicted (true) label: {int(right.sum())}/{count} right")


ARCHITECTURE = ViT()
