"""Config overrides keep each key's type or fail with one line naming the key, the value and what was expected."""

import pytest

from reasoner.config import apply_overrides, load_config


@pytest.fixture()
def config(tmp_path):
    path = tmp_path / "c.py"
    path.write_text(
        "import ml_collections\n"
        "def get_config(variant=None):\n"
        "    c = ml_collections.ConfigDict()\n"
        "    c.train = ml_collections.ConfigDict(dict(batch_size=8, lr=1e-3, name='run', stop=('a',), remat=False,"
        " extra=None))\n"
        "    return c\n")
    return load_config(str(path))


@pytest.mark.parametrize("override, message", [
    ("train.batch_size=2.5", "--config.train.batch_size=2.5: expected an integer"),
    ("train.batch_size=true", "--config.train.batch_size=True: expected an integer"),
    ("train.batch_size=eight", "--config.train.batch_size='eight': expected an integer"),
    ("train.lr=[1,2]", "--config.train.lr=[1, 2]: expected a number"),
    ("train.lr=fast", "--config.train.lr='fast': expected a number"),
    ("train.stop=3", "--config.train.stop=3: expected a list like [a, b]"),
    ("train.name=[1]", "--config.train.name=[1]: expected a string"),
    ("train.remat=1", "--config.train.remat=1: expected true or false"),
    ("train=3", "--config.train=3: 'train' is a section"),
])
def test_wrong_types_are_one_line_errors(config, override, message):
    with pytest.raises(ValueError) as err:
        apply_overrides(config, [override])
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


@pytest.mark.parametrize("override, key, value", [
    ("train.batch_size=16", "batch_size", 16),
    ("train.batch_size=16.0", "batch_size", 16),  # integral: lossless
    ("train.lr=1", "lr", 1.0),
    ("train.lr=2e-5", "lr", 2e-5),
    ("train.stop=['x','y']", "stop", ("x", "y")),
    ("train.name=123", "name", "123"),
    ("train.extra=[1,2]", "extra", [1, 2]),  # None in the config: anything goes
])
def test_lossless_conversions(config, override, key, value):
    apply_overrides(config, [override])
    got = config.train[key]
    assert got == value and type(got) is type(value)
