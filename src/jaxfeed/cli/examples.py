"""Each subcommand's examples, shown at the end of its ``--help``.

A module of its own so that the parser (``jaxfeed.cli``) and the commands (``jaxfeed.cli.commands``:
``jaxfeed train --help`` is printed by the training flags' own parser) both import it, and no
module imports its package's ``__init__``.

>>> sorted(EXAMPLES)[:3]
['bench', 'cache', 'eval']
"""

from __future__ import annotations

from jaxfeed.cli import cache

EXAMPLES: dict[str, str] = {
    "train": """examples:
  jaxfeed train                                    # the built-in digits, to try it
  jaxfeed train --data ./my_images --val-split 0.2 --image-size 64 --epochs 5
  jaxfeed train --data houses.csv --label-column price          # regression, inferred
  jaxfeed train --data reviews.csv --text-column review --label-column stars   # text
  jaxfeed train --task lm --data corpus.txt --seq-len 128       # a language model
  jaxfeed train --task lm --data corpus.txt --model hf:openai-community/gpt2 --seq-len 512
  jaxfeed train --task lm --data corpus.txt --model hf:meta-llama/Llama-3.2-1B --lora 16 --quantize int8
  jaxfeed train --data ./my_images --model my_model.py:Net --lr 3e-4 --schedule cosine
  jaxfeed train --model my_model.py:Net --model.init_args.width 64       # constructor arguments
  jaxfeed train --optimizer lion --optimizer.init_args.b1 0.95 --grad-clip 1.0
  jaxfeed train --metrics f1,auc --monitor eval_f1 --class-weights balanced
  jaxfeed train --config run.yaml --epochs 20                   # flags override the file
  jaxfeed train --config run.yaml --print-config                # the resolved options, as YAML
  jaxfeed train --out runs/mine --resume --epochs 20            # the run's own config.json""",
    "export": """examples:
  jaxfeed export runs/reviews --format hf --out reviews-model   # transformers loads it
  jaxfeed export runs/corpus-lora --format hf --out adapter     # a --lora run: peft loads it
  jaxfeed export runs/corpus-lora --format hf --out merged --merge   # adapters merged in""",
    "eval": """examples:
  jaxfeed eval runs/mine
  jaxfeed eval runs/mine --json --checkpoint last
  jaxfeed eval runs/mine --split train
  jaxfeed eval runs/mine --data ./other_images               # all of it, when it has no splits""",
    "predict": """examples:
  jaxfeed predict runs/mine photo.jpg other.png
  jaxfeed predict runs/mine ./photos --output preds.csv      # a folder, recursively
  ls *.png | jaxfeed predict runs/mine - --json
  jaxfeed predict runs/houses new_houses.csv --checkpoint last
  jaxfeed predict runs/reviews "a fine film" reviews.txt      # texts, one a line in .txt""",
    "generate": """examples:
  jaxfeed generate runs/corpus "Once upon a time" --max-new-tokens 50
  jaxfeed generate runs/corpus "abc" "xyz" --temperature 0.8 --top-k 40 --seed 1
  jaxfeed generate runs/corpus "abc" --temperature 0                   # greedy
  jaxfeed generate hf:openai-community/gpt2 "Hello" --temperature 0    # a Hub model, no run
  jaxfeed generate hf:Qwen/Qwen2.5-0.5B-Instruct "Name three colours" --chat
  jaxfeed generate runs/tuned "Once" --stop "." --max-new-tokens 200  # stops at the first full stop""",
    "info": """examples:
  jaxfeed info digits
  jaxfeed info ./data --split train
  jaxfeed info ./saved --verify""",
    "bench": """examples:
  jaxfeed bench formatting --quick
  jaxfeed bench loader --quick --plot charts/      # tables, plus charts/loader.png
  jaxfeed bench all""",
    "cache": cache.EXAMPLES,
    "launch": """examples:
  jaxfeed launch --num-processes 2 --devices-per-process 4 -- jaxfeed train --batch-size 64""",
}
