"""`aoe run`: a training script tuned as it is, without a changed line (the `ddtrace-run` convention).

    AOE_MODE=2 aoe run -- python train.py --epochs 3
    aoe run -j 2 --work_path results -- python train.py

| file | what |
|---|---|
| `cli.py` | the `aoe run` command: options -> environment, the child process, its exit code |
| `boot/sitecustomize.py` | imported first by the child's interpreter (PYTHONPATH): installs the hooks |
| `hooks.py` | the post-import finder; Keras `fit`; one tuned step per process; errors exit 2 |
| `tf_hooks.py` | `tf.function` training calls and `tf.compat.v1.Session` (its NpuOptimizer `parameter_map`) |
| `torch_hooks.py` | PyTorch's global module-call and optimizer-step hooks: the first `optimizer.step()` |

See README.md.
"""
