"""A small model trained on MNIST with Hugging Face transformers' `Trainer`.

    torchrun --nnodes=2 --node-rank=I --nproc-per-node=N --master-addr=H --master-port=P \\
        hf_trainer.py --data-dir DIR [--epochs 2] [--save-steps 10]

The model is a PreTrainedModel of its own, built from its config (a two-layer network over the
pixels): nothing is downloaded. The Trainer reads torchrun's variables and trains with DDP
(NCCL on GPUs, gloo on the CPU of a node without them). Every --save-steps steps it writes
hf_trainer/checkpoint-N/ in the current folder: the main process the model, the optimizer, the
scheduler and trainer_state.json (last), every process its RNG state. At start, every process
resumes from the newest checkpoint that has its trainer_state.json (a save cut short has none),
so a rerun in the same folder, or a restart after a crash, goes on from there. At the end, the
model (config.json, model.safetensors) and trainer_state.json, which holds every logged line,
go to hf_trainer/.

Every process reads the checkpoint that the main process wrote: the nodes must share the
current folder (the launcher's shared folder does that).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Dataset
from torchvision.datasets import MNIST
from transformers import PreTrainedConfig, PreTrainedModel, Trainer, TrainingArguments
from transformers.modeling_outputs import SequenceClassifierOutput
from transformers.trainer_utils import EvalPrediction
from transformers.utils import logging

OUTPUT_DIR = Path("hf_trainer")
CHECKPOINT = re.compile(r"checkpoint-(\d+)")


class DigitsConfig(PreTrainedConfig):
    model_type = "digits-mlp"

    def __init__(self, hidden_size: int = 128, num_labels: int = 10, **kwargs: object) -> None:
        self.hidden_size = hidden_size
        super().__init__(num_labels=num_labels, **kwargs)


class DigitsClassifier(PreTrainedModel):
    """28x28 pixels -> hidden -> 10 digits, with the Trainer's interface: a loss when labels
    are given."""

    config_class = DigitsConfig

    def __init__(self, config: DigitsConfig) -> None:
        super().__init__(config)
        self.hidden = nn.Linear(28 * 28, config.hidden_size)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(
        self, pixel_values: torch.Tensor, labels: torch.Tensor | None = None
    ) -> SequenceClassifierOutput:
        logits = self.classifier(torch.relu(self.hidden(pixel_values.flatten(1))))
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return SequenceClassifierOutput(loss=loss, logits=logits)


class Digits(Dataset):
    """MNIST's raw files as the Trainer's examples: pixel_values and labels."""

    def __init__(self, data_dir: str, train: bool) -> None:
        split = MNIST(data_dir, train=train)
        self.pixels = split.data.float().div(255).sub(0.1307).div(0.3081).unsqueeze(1)
        self.labels = split.targets

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"pixel_values": self.pixels[index], "labels": self.labels[index]}


def accuracy(prediction: EvalPrediction) -> dict[str, float]:
    predicted = prediction.predictions.argmax(axis=-1)
    return {"accuracy": float((predicted == prediction.label_ids).mean())}


def last_complete_checkpoint() -> tuple[Path, int] | None:
    """The newest checkpoint folder whose trainer_state.json was written, and its step."""
    found = [
        (int(match.group(1)), path)
        for path in (OUTPUT_DIR.iterdir() if OUTPUT_DIR.is_dir() else [])
        if (match := CHECKPOINT.fullmatch(path.name)) and (path / "trainer_state.json").is_file()
    ]
    if not found:
        return None
    step, path = max(found)
    return path, step


def main() -> None:
    parser = argparse.ArgumentParser(description="MNIST with the Trainer, resumable")
    parser.add_argument("--data-dir", default="data", help="MNIST root: DIR/MNIST/raw/*-ubyte")
    parser.add_argument("--epochs", type=float, default=2, help="total epochs, resumed ones too")
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--save-steps", type=int, default=10)
    args = parser.parse_args()
    logging.disable_progress_bar()  # a log file gets the Trainer's lines, not tqdm's bars

    gpu = torch.cuda.is_available()
    training_args = TrainingArguments(
        output_dir=str(OUTPUT_DIR),
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=128,
        learning_rate=1e-3,
        warmup_steps=5,
        save_strategy="steps",
        save_steps=args.save_steps,
        save_total_limit=2,
        eval_strategy="epoch",
        logging_steps=5,
        disable_tqdm=True,
        report_to="none",
        use_cpu=not gpu,
        ddp_backend=None if gpu else "gloo",
        ddp_find_unused_parameters=False,
        dataloader_num_workers=0,
        seed=0,
    )
    try:
        trainer = Trainer(
            model=DigitsClassifier(DigitsConfig()),
            args=training_args,
            train_dataset=Digits(args.data_dir, train=True),
            eval_dataset=Digits(args.data_dir, train=False),
            compute_metrics=accuracy,
        )
        resume_from = None
        checkpoint = last_complete_checkpoint()
        if checkpoint:
            resume_from, step = checkpoint
            rank = training_args.process_index
            print(f"process {rank}: resumed from {resume_from} at step {step}")
        trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        trainer.save_model()  # the model alone, in hf_trainer/, for from_pretrained
        trainer.save_state()
        if trainer.is_world_process_zero():
            print(f"done: {trainer.state.global_step} steps, model and state in {OUTPUT_DIR}/")
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
