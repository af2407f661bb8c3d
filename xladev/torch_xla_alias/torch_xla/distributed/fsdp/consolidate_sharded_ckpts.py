"""`python -m torch_xla.distributed.fsdp.consolidate_sharded_ckpts`: builds the full model's checkpoint from every
rank's sharded FSDP checkpoint (`consolidate_sharded_model_checkpoints`)."""

from __future__ import annotations

import argparse
import sys

from xladev.runtime.parallel.fsdp.state_dict_utils import ShardedCheckpointError, consolidate_sharded_model_checkpoints


def main(argv: list[str] | None = None) -> int:
    """Parses PyTorch/XLA's options (`--ckpt_prefix`, `--ckpt_suffix`, `--save_path`) and consolidates.

    Returns:
      0, or 2 with a one-line error when the files do not make one model.
    """
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ckpt_prefix", type=str, required=True, help="the checkpoint files' common start")
    parser.add_argument("--ckpt_suffix", type=str, default="*.pth", help="a glob for the rest of their names")
    parser.add_argument("--save_path", type=str, default="", help="default: ckpt_prefix + '_consolidated.pth'")
    args = parser.parse_args(argv)
    try:
        consolidate_sharded_model_checkpoints(args.ckpt_prefix, args.ckpt_suffix, args.save_path)
    except (FileNotFoundError, ShardedCheckpointError) as error:
        print(f"consolidate_sharded_ckpts: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
