"""Coverage-guided fuzz targets (atheris): see README.md here and ``run.py``.

Each target module offers ``check(data)`` (one input; an exception other than the parser's own
refusal, or a disagreement with the oracle, is a finding), ``seeds()`` (a starting corpus)
and ``DICTIONARY`` (tokens for libFuzzer's mutations); ``run.TARGETS`` names the modules whose
coverage guides each. The modules import no atheris: ``tests/unit/test_fuzz_targets.py``
runs every ``check`` over its seeds and the findings kept as tests, without a fuzzer.
"""
