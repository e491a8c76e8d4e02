"""The whole-run benchmark measures a lighter configuration than the defaults
the same way (``--options``): what a user trading a verdict for speed reads."""

import pytest

from benchmarks import bench_whole_run


def test_options_are_the_callbacks_keyword_arguments():
    assert bench_whole_run.lens_options("compare_every=1000, nonfinite_replay=False") == {
        "compare_every": 1000, "nonfinite_replay": False}
    assert bench_whole_run.lens_options(None) == {}
    assert bench_whole_run.lens_options("") == {}


@pytest.mark.parametrize("text, said", [("compare_every", "is not name=value"),
                                        ("compare_every=often", "is not a Python literal")])
def test_an_option_that_cannot_be_read_is_refused_with_its_reason(text, said):
    with pytest.raises(SystemExit, match=said):
        bench_whole_run.lens_options(text)
