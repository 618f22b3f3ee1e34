"""Presets as data (issue 30 item 2): a GPU or a model is one data file, read by the typed
loader scenarios/preset_data.py (one-line errors naming the file and the field); a GPU without
operator fits is refused unless the scenario names one; every citation names a document that
lives in the repo."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import run_main
from scenarios import preset_data, presets, scenario
from scenarios.preset_models import SOURCE_PREFIXES

ROOT = Path(__file__).resolve().parent.parent
H200 = (ROOT / "scenarios/data/presets/hardware/h200.yaml").read_text()


def x300_file(tmp_path, *, fit: bool = True) -> Path:
    """A new GPU, "x300", as one file: the H200's file with its name, slices, HBM and fit changed."""
    text = H200.replace("gpu: h200\n", "gpu: x300\n").replace("order: 1\n", "")
    text = text.replace('gpu_name: "NVIDIA H200 SXM 141GB"', 'gpu_name: "NVIDIA X300"')
    text = text.replace("node_slices: [1, 2, 4, 8]", "node_slices: [1, 2]")
    text = text.replace("    value: 150_323_855_360\n", "    value: 107_374_182_400\n")  # 100 GiB per GPU
    if not fit:
        text = re.sub(r'  operator_fit:\n    value: "h100"\n    source: "[^\n]*"\n', "", text)
        assert "operator_fit" not in text
    (tmp_path / "hardware").mkdir()
    path = tmp_path / "hardware" / "x300.yaml"
    path.write_text(text)
    return path


TOY = """family: toy
models:
  toy-1b:
    name: Toy-1B
    attention: gqa
    kv_dtype: bf16
    weight_dtype: bf16
    fields:
      num_layers: {value: 4, source: "assumption: a toy"}
      full_layers: {value: 4, source: "assumption: a toy"}
      num_q_heads: {value: 8, source: "assumption: a toy"}
      num_kv_heads: {value: 2, source: "assumption: a toy"}
      head_dim: {value: 64, source: "assumption: a toy"}
      kv_dtype_bytes: {value: 2, source: "assumption: bf16"}
      full_kv_bytes_per_token: {rule: kv_row_bytes x full_layers, source: "assumption: SGLang's GQA row"}
      total_params: {value: 1_000_000_000, source: "assumption: a toy"}
      active_params: {value: 1_000_000_000, source: "assumption: a toy"}
      weight_bytes: {value: 2_000_000_000, source: "assumption: bf16"}
      hidden_size: {value: 512, source: "assumption: a toy"}
      vocab_size: {value: 32_000, source: "assumption: a toy"}
      max_context_tokens: {value: 8192, source: "assumption: a toy"}
      swa_layers: {value: 0, source: "assumption: none"}
      recurrent_layers: {value: 0, source: "assumption: none"}
      state_layers: {value: 0, source: "assumption: none"}
      swa_kv_bytes_per_token: {value: 0, source: "assumption: none"}
      conv_state_elements_per_layer: {value: 0, source: "assumption: none"}
      ssm_state_elements_per_layer: {value: 0, source: "assumption: none"}
      conv_state_dtype_bytes: {value: 2, source: "assumption: bf16"}
      ssm_state_dtype_bytes: {value: 4, source: "assumption: fp32"}
      state_bytes: {value: 0, source: "assumption: none"}
      kernel_factor: {value: 1, source: "assumption: none"}
"""


def quickstart(model: str, hardware) -> dict:
    raw = scenario.load("quickstart")
    return dict(raw, model=model, hardware=hardware)


def test_adding_a_gpu_is_one_file(tmp_path, monkeypatch):
    x300_file(tmp_path)
    monkeypatch.setenv(preset_data.PATH_ENV, str(tmp_path))
    hw = presets.get_hardware("x300x2")
    assert (hw.name, hw.gpu_name, hw.num_gpus, hw.hbm_bytes_per_gpu) == ("x300x2", "NVIDIA X300", 2, 100 * 2**30)
    assert list(presets.HARDWARE)[-2:] == ["x300x1", "x300x2"]  # no `order`: after the built-in GPUs
    assert hw.operator_fit == "h100" and hw.bf16_flops == presets.get_hardware("h200x2").bf16_flops
    sc = scenario.resolve(quickstart("qwen3-32b", "x300x1"))
    # (100 GiB x 0.88 - 65.6e9 B of weights) / 262,144 B per token = 110,204.6 -> 110,204 -> pages of 64
    assert sc.hardware is presets.get_hardware("x300x1")
    assert sc.doc["cache"]["l1_tokens"] == sc.cache.capacity_tokens == 110_144
    monkeypatch.delenv(preset_data.PATH_ENV)
    with pytest.raises(ValueError, match="unknown hardware preset 'x300x1'"):
        presets.get_hardware("x300x1")


def test_adding_a_model_is_one_file(tmp_path, monkeypatch):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "toy.yaml").write_text(TOY)
    monkeypatch.setenv(preset_data.PATH_ENV, str(tmp_path))
    m = presets.get_model("Toy-1B")
    assert (m.family, m.full_kv_bytes_per_token, m.kernel_factor) == ("toy", 2 * (64 + 64) * 2 * 4, 1.0)
    assert type(m.kernel_factor) is float and m.sources["full_kv_bytes_per_token"] == "assumption: SGLang's GQA row"
    sc = scenario.resolve(quickstart("toy-1b", "h200x1"))
    # (140 GiB x 0.88 - 2e9 B) / 2,048 B per token = 63,615,719.1 -> pages of 64: 993,995 x 64
    assert sc.model is m and sc.doc["cache"]["l1_tokens"] == 63_615_680


def test_a_gpu_without_fits_is_refused_in_one_line_unless_the_scenario_names_one(tmp_path, monkeypatch, capsys):
    x300_file(tmp_path, fit=False)
    monkeypatch.setenv(preset_data.PATH_ENV, str(tmp_path))
    assert presets.get_hardware("x300x1").operator_fit is None
    rc, out, err = run_main(capsys, ["run", "quickstart", "--smoke", "--no-plots", "--no-progress",
                                     "--set", "hardware=x300x1", "--out", str(tmp_path / "out")])
    assert rc == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "hardware x300x1: operator_fit None: expected one of a100, h100" in err
    assert not (tmp_path / "out").exists()
    from sim.operators import OperatorCostModel, load_fits

    sc = scenario.resolve(quickstart("qwen3-32b", {"base": "x300x1", "operator_fit": "h100"}))
    assert sc.hardware.operator_fit == "h100"
    assert OperatorCostModel(sc.model, sc.hardware, sc.tp).gemm_fit == load_fits()["h100"]["gemm"]


BAD = [  # (what the file says, the one-line error)
    (lambda t: t.replace("    value: 4.8e+12\n", "    value: fast\n"),
     "h200.yaml: fields.hbm_bytes_per_s.value: got 'fast'; expected a number"),
    (lambda t: t.replace("    value: 150_323_855_360\n", "    value: 1.5e+11\n"),
     "h200.yaml: fields.hbm_bytes_per_gpu.value: got 150000000000.0; expected an integer"),
    (lambda t: t.replace("    rule: node slice\n", "    rule: eight\n"),
     "h200.yaml: fields.num_gpus.rule: got 'eight'; expected one of bf16_flops x 790 / 989, "
     "hbm_bytes_per_s x 4.3 / 4.8 / 2, node slice"),
    (lambda t: re.sub(r'(  nvlink_bytes_per_s:\n    value: 4.5e\+11\n)    source: "[^\n]*"\n', r"\1", t),
     "h200.yaml: fields.nvlink_bytes_per_s: got {'value': 450000000000.0}; expected {value, source} or "
     "{rule, source}"),
    (lambda t: t.replace("  nvlink_bytes_per_s:", "  nvlink_gbps:"),
     "h200.yaml: fields.nvlink_gbps: got 'an unknown field'; expected one of num_gpus, hbm_bytes_per_gpu, "),
    (lambda t: t.replace("node_slices: [1, 2, 4, 8]", "node_slices: [0]"),
     "h200.yaml: node_slices: got [0]; expected a list of GPU counts >= 1"),
    (lambda t: t.replace("order: 1\n", "order: 1\ngpu: h201\n"),
     "h200.yaml:8: gpu: given twice (also on line 6); expected each key once"),
    (lambda t: t.replace("node_slices: [1, 2, 4, 8]", "node_slices: [1, 2"), "h200.yaml:10: not valid YAML ("),
    (lambda t: t.replace("order: 1", "order: first"), "h200.yaml: order: got 'first'; expected an integer"),
    (lambda t: t.replace("gpu_name:", "gpu_nam:"), "h200.yaml: gpu_nam: got 'an unknown key'; expected one of gpu"),
    (lambda t: t.replace('    source: "assumption: 10 us per transfer', '    source: "10 us per transfer'),
     "h200.yaml: h200x1: h200x1: sources ['pcie_latency_s'] must cite MODELS.md/HARDWARE.md"),
    (lambda t: t.replace("    value: 6.4e+10\n", "    value: 1.0e+10\n"),
     "h200.yaml: h200x1: h200x1: realistic PCIe bandwidth exceeds the peak"),
]


@pytest.mark.parametrize("edit,message", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_a_bad_preset_file_is_one_line_naming_the_file_and_the_field(tmp_path, edit, message):
    path = tmp_path / "h200.yaml"
    path.write_text(edit(H200))
    with pytest.raises(preset_data.PresetFileError) as e:
        preset_data.read_hardware(path)
    text = str(e.value)
    assert "\n" not in text and text.startswith(str(path) + ":")
    assert text[len(str(tmp_path)) + 1:].startswith(message), text


def test_a_preset_key_given_twice_is_refused(tmp_path, monkeypatch):
    (tmp_path / "hardware").mkdir()
    (tmp_path / "hardware" / "h200.yaml").write_text(H200)
    monkeypatch.setenv(preset_data.PATH_ENV, str(tmp_path))
    with pytest.raises(preset_data.PresetFileError) as e:
        presets.get_hardware("h200x1")
    assert str(e.value) == (f"{tmp_path / 'hardware' / 'h200.yaml'}: h200x1: a preset of that key is already in "
                            f"{preset_data.BUILTIN_DIR / 'hardware' / 'h200.yaml'}; expected a new key")


def test_a_bad_model_file_names_the_file_and_the_field(tmp_path):
    path = tmp_path / "toy.yaml"
    path.write_text(TOY.replace("num_kv_heads: {value: 2,", "num_kv_heads: {value: two,"))
    with pytest.raises(preset_data.PresetFileError) as e:
        preset_data.read_models(path)
    assert str(e.value) == f"{path}: models.toy-1b.fields.num_kv_heads.value: got 'two'; expected an integer"
    path.write_text(TOY.replace("      weight_bytes:", "      weight_byte:"))
    with pytest.raises(preset_data.PresetFileError, match=r"toy.yaml: models.toy-1b.fields.weight_byte: got 'an "
                                                            r"unknown field'; expected one of num_layers, "):
        preset_data.read_models(path)
    path.write_text(TOY.replace("      full_layers: {value: 4,", "      full_layers: {value: 3,"))
    with pytest.raises(preset_data.PresetFileError) as e:
        preset_data.read_models(path)
    assert str(e.value) == f"{path}: models.toy-1b: Toy-1B: full 3 + swa 0 + recurrent 0 layers != 4"
    path.write_text(TOY.replace("      num_kv_heads: {value: 2, source: \"assumption: a toy\"}\n", ""))
    with pytest.raises(preset_data.PresetFileError) as e:
        preset_data.read_models(path)
    assert str(e.value) == (f"{path}: models.toy-1b.fields.full_kv_bytes_per_token.rule: kv_row_bytes x full_layers "
                            "needs 'num_kv_heads'; expected the fields it is computed from")


def test_importing_the_presets_reads_no_file():
    code = ("import sys, scenarios.presets as p, scenarios.preset_data as d; "
            "print('yaml' in sys.modules, d.load.cache_info().currsize); "
            "p.get_model('qwen3-8b'); print(d.load.cache_info().currsize)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "0", "1"]


# -- every cited document lives in the repo --------------------------------------------------

DOCS = {"MODELS.md": "docs/sources/shared/MODELS.md", "HARDWARE.md": "docs/sources/shared/HARDWARE.md",
        "docs/sources/models.md": "docs/sources/models.md", "docs/sources/hardware.md": "docs/sources/hardware.md",
        "sim/opdata/vidur_fit.json": "sim/opdata/vidur_fit.json"}


def citations():
    for table in presets.MODELS, presets.HARDWARE:
        for key, p in table.items():
            for field, text in p.sources.items():
                yield key, field, text


def test_every_citation_names_a_document_in_the_repo():
    assert set(DOCS) | {"assumption:"} == set(SOURCE_PREFIXES)
    for doc in DOCS.values():
        assert (ROOT / doc).is_file(), doc
    models_md = (ROOT / DOCS["MODELS.md"]).read_text()
    sections = re.findall(r"^## (.+)$", models_md, re.M) + ["SGLang rules used in every derived line"]
    seen = {"MODELS.md": 0, "HARDWARE.md": 0}
    for key, field, text in citations():
        if text.startswith("MODELS.md "):
            seen["MODELS.md"] += 1
            assert any(text[len("MODELS.md "):].startswith(s) for s in sections), (key, field, text)
        elif text.startswith("HARDWARE.md "):
            seen["HARDWARE.md"] += 1  # its rows are cited by short names ("host", "NICs")
        else:
            assert text.startswith(tuple(DOCS) + ("assumption:",)), (key, field, text)
    assert seen == {"MODELS.md": 249, "HARDWARE.md": 72}


def test_no_unread_twin_is_left():
    assert sorted(p.name for p in (ROOT / "docs/sources").glob("*.yaml")) == []
    assert len(list((ROOT / "scenarios/data/presets/models").glob("*.yaml"))) == 10
    assert len(list((ROOT / "scenarios/data/presets/hardware").glob("*.yaml"))) == 7
