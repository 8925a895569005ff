"""Token ids outside the model's vocabulary (issue 42, item 8): a classifier's training,
evaluation and prediction name the id, its column, row and position, as a language model's
targets already were; never a non-finite loss that names nothing, nor a silent read of another
embedding row."""

from typing import ClassVar

import numpy as np
import optax
import pytest
from flax import nnx

from jaxfeed import DataLoader, Dataset, Trainer
from jaxfeed.models import TransformerClassifier, TransformerLM
from jaxfeed.train.ids import id_columns, token_id_ranges

COLUMNS = {"input_ids": "input_ids", "attention_mask": "attention_mask"}


def _data(bad=None, pad=None):
    ids = (np.arange(16 * 8, dtype=np.int32).reshape(16, 8) % 19) + 1
    mask = np.ones_like(ids)
    if pad is not None:  # row 3 padded from position 6 with `pad`
        ids[3, 6:], mask[3, 6:] = pad, 0
    if bad is not None:
        ids[5, 2] = bad
    return Dataset.from_dict({"input_ids": ids, "attention_mask": mask,
                              "label": np.arange(16) % 2})  # fmt: skip


def _trainer(**kwargs):
    model = TransformerClassifier(20, 2, dim=16, depth=1, num_heads=2, max_length=16,
                                  rngs=nnx.Rngs(0))  # fmt: skip
    return Trainer(model, optax.adam(1e-3), inputs=COLUMNS, verbose=0, **kwargs)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            _data(bad=20),
            r"token id 20 in column 'input_ids' \(row 5 of the batch, position 2\) "
            r"at epoch 1, step 1 of the epoch is outside the model's vocabulary of 20 ids \(0\.\.19\)",
        ),
        (_data(bad=-3), r"token id -3 in column 'input_ids' .* a negative id would read another"),
        (
            _data(pad=99),
            r"the pad id 99 in column 'input_ids' \(row 3 of the batch, position 6, "
            r"a padding position\) at epoch 1.*pad with an id of the vocabulary",
        ),
    ],
    ids=["past the vocabulary", "negative", "pad id"],
)
def test_training_a_classifier_names_an_id_outside_the_vocabulary(data, message):
    with pytest.raises(ValueError, match=message):
        _trainer().fit(DataLoader(data, 8), epochs=1)


def test_evaluation_and_prediction_name_it_too():
    trainer = _trainer()
    trainer.fit(DataLoader(_data(), 8), epochs=1)
    with pytest.raises(ValueError, match=r"token id 20 in column 'input_ids' .* in the eval data"):
        trainer.evaluate(DataLoader(_data(bad=20), 8))
    rows = _data(pad=77).with_format("numpy")[:8]
    with pytest.raises(ValueError, match=r"the pad id 77 .* in the predict batch"):
        trainer.predict(dict(rows))
    assert trainer.predict(dict(_data().with_format("numpy")[:8])).shape == (8, 2)
    # the model called eagerly refuses them as well
    with pytest.raises(ValueError, match=r"token id 20, outside the model's vocabulary of 20"):
        trainer.model(np.array([[1, 20]], np.int32))


def test_a_language_models_inputs_are_ids_too_and_the_models_that_embed_them_say_so():
    lm = TransformerLM(20, dim=16, depth=1, num_heads=2, max_length=16, rngs=nnx.Rngs(0))
    trainer = Trainer(lm, optax.adam(1e-3), loss="next_token", inputs=COLUMNS, targets=None,
                      metrics=[], verbose=0)  # fmt: skip
    data = _data(pad=25).remove_columns(["label"])  # a pad id never a target, still embedded
    with pytest.raises(ValueError, match=r"the pad id 25 in column 'input_ids'"):
        trainer.fit(DataLoader(data, 8), epochs=1)
    # the protocol: token_id_ranges(), or an int vocab_size with input_ids, or a Hub config

    class Hub(nnx.Module):
        hub_config: ClassVar[dict] = {"vocab_size": 100, "type_vocab_size": 2}

        def __call__(self, input_ids, attention_mask=None, token_type_ids=None): ...

    assert token_id_ranges(Hub()) == {"input_ids": 100, "token_type_ids": 2}
    assert id_columns(Hub(), ["ids"], {"token_type_ids": "types"}) == (("ids", 100), ("types", 2))
    assert token_id_ranges(nnx.Linear(2, 2, rngs=nnx.Rngs(0))) == {}
