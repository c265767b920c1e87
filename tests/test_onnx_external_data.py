"""A model loaded from its checked bytes never reads external data, whatever path the data names,
and loading one leaves nothing behind in the temp folder, even in a process that is killed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import needs
from magicselector.errors import BundleError


def _model_bytes(folder: Path, location: str | None) -> bytes:
    """A one-MatMul model; with ``location``, its weights are external data at that path (a real
    weights.bin is written in ``folder``, so only the loader's refusal keeps it from being read)."""
    onnx = pytest.importorskip("onnx", reason=needs("export"))
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.ones((4, 4), np.float32), "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["Y"])], "g",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 4])], [weights])
    model = helper.make_model(graph)
    if location is None:
        return bytes(model.SerializeToString())
    onnx.save_model(model, folder / "model.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    model = onnx.load(folder / "model.onnx", load_external_data=False)
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = location
    return bytes(model.SerializeToString())


@pytest.mark.parametrize("location", ["weights.bin", "../data/weights.bin", "ABSOLUTE"])
def test_external_data_is_refused_whatever_path_it_names(tmp_path, monkeypatch, location):
    from magicselector.backends.onnx import OnnxModel

    data_folder = tmp_path / "data"
    data_folder.mkdir()
    location = str(data_folder / "weights.bin") if location == "ABSOLUTE" else location
    data = _model_bytes(data_folder, location)
    monkeypatch.chdir(data_folder)  # weights.bin sits in the working folder too
    with pytest.raises(BundleError, match="external data"):
        OnnxModel(data_folder / "model.onnx", data=data)


def test_a_killed_process_that_loaded_a_model_from_bytes_leaves_no_folder(tmp_path):
    """The temp folder given to the process holds no folder though it is killed (SIGKILL: no exit
    handler runs); it used to keep one empty magicselector-no-external-data-* folder per process."""
    model = tmp_path / "model.onnx"
    model.write_bytes(_model_bytes(tmp_path, None))
    temp = tmp_path / "temp"
    temp.mkdir()
    script = ("import sys, time\n"
              "from pathlib import Path\n"
              "from magicselector.backends.onnx import OnnxModel\n"
              "path = Path(sys.argv[1])\n"
              "model = OnnxModel(path, data=path.read_bytes())\n"
              "out = model.session.run(None, {'X': __import__('numpy').ones((1, 4), 'float32')})[0]\n"
              "print('loaded', float(out.sum()), flush=True)\n"
              "time.sleep(60)\n")
    env = {**os.environ, "TMPDIR": str(temp), "TEMP": str(temp), "TMP": str(temp)}
    proc = subprocess.Popen([sys.executable, "-c", script, str(model)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().split() == ["loaded", "16.0"]  # the model ran from its bytes
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    # (importing onnxruntime writes a .ses file there, which is its own)
    assert sorted(p.name for p in temp.iterdir() if p.is_dir()) == []
