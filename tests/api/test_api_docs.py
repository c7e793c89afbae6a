"""docs/api.md is what scripts/gen_api_docs.py generates from the current docstrings, and every
public name has a docstring."""

import pathlib

import pytest

from tests.module_from_file import module_from_file

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def generator():
    return module_from_file(REPO / "scripts" / "gen_api_docs.py", "gen_api_docs")


def test_api_reference_is_up_to_date(generator):
    written = (REPO / "docs" / "api.md").read_text()
    assert written == generator.render(), (
        "docs/api.md is out of date: run `python scripts/gen_api_docs.py`"
    )


def test_every_public_name_has_a_docstring(generator):
    assert generator.undocumented_names() == []


def test_every_public_name_is_in_the_reference(generator):
    names = [qualified for qualified, _ in generator.public_objects()]
    assert len(names) > 30  # sok_lite, optimizers, keras and sok_v1 were all found
    text = generator.render()
    missing = [name for name in names if f"### {name}\n" not in text]
    assert missing == []


def test_docstrings_become_markdown(generator):
    doc = """Does a thing.

    Args:
      x: the input, [batch, dim].
        Continued here.

      y: another <thing>.

    Returns:
      A tensor.

    >>> f(1)
    2
    """
    assert generator.docstring_markdown(doc) == [
        "Does a thing.",
        "",
        "**Args:**",
        "",
        "- `x`: the input, [batch, dim]. Continued here.",
        "- `y`: another &lt;thing>.",
        "",
        "**Returns:**",
        "",
        "A tensor.",
        "",
        generator.DOCTEST_FENCE,
        ">>> f(1)",
        "2",
        "```",
    ]
