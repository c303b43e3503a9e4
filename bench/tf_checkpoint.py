"""TensorFlow's own checkpoint write and read, for bench/checkpoint.bench.ts.

Usage: python tf_checkpoint.py <dir> <tensors> <floats_per_tensor> <reps>

Makes `tensors` float32 variables of `floats_per_tensor` values (sin(i + t), as the benchmark's
store), then, after one warm-up round, `reps` times: tf.train.Checkpoint.write(prefix) (no fsync;
the index is written in place) and Checkpoint.read(prefix) into the same variables. Prints one
JSON object: the times in ms, and the variables' bytes as TensorFlow's index lists them.
"""
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def main() -> None:
    directory, tensors, floats, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    variables = {
        f"layer{t}": tf.Variable(np.sin(np.arange(floats, dtype=np.float64) + t).astype(np.float32))
        for t in range(tensors)
    }
    ckpt = tf.train.Checkpoint(**variables)
    writes, reads = [], []
    prefix = os.path.join(directory, "tf-ckpt")
    for rep in range(reps + 1):
        start = time.perf_counter()
        path = ckpt.write(prefix)
        write_ms = (time.perf_counter() - start) * 1000
        start = time.perf_counter()
        ckpt.read(path).assert_existing_objects_matched()
        read_ms = (time.perf_counter() - start) * 1000
        if rep > 0:
            writes.append(write_ms)
            reads.append(read_ms)
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    variable_bytes = sum(
        int(np.prod(shape)) * 4 for name, shape in shapes.items() if name.startswith("layer")
    )
    print(json.dumps({"tensorflow": tf.__version__, "writeMs": writes, "readMs": reads, "variableBytes": variable_bytes}))


if __name__ == "__main__":
    main()
