"""Every private Keras and TensorFlow API tb_gradlens touches is still there.

``tb_gradlens/writing/keras_private.py`` is the one module that reaches into Keras'
internals.  A Keras (or TensorFlow) upgrade that renames one of them fails
here, with its name, before it fails anywhere else.
"""

import inspect

import keras
import numpy as np
import tensorflow as tf

from tb_gradlens.writing import keras_private


def _model():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dropout(0.5)])
    model.compile(optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD()), loss="mse")
    return model


def test_private_attributes_exist():
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer

    model = _model()
    dense = model.layers[0]
    assert keras_private.flatten_layers(model)[0] is model
    assert keras_private.own_trainable_variables(dense) == [dense.kernel, dense.bias]
    assert keras_private.uses_default_train_step(model)
    for name in ("train_step", "_compute_loss", "_make_function", "_symbolic_build", "_jit_compile"):
        assert hasattr(TensorFlowTrainer, name) or hasattr(model, name), name
    assert keras_private.loss_objects(model)
    assert callable(keras_private.var_key(model.optimizer))
    assert keras_private.all_reduce(model.optimizer) is not None
    keras_private.build_as_apply_does(model.optimizer, model.trainable_variables)
    assert isinstance(model.optimizer.dynamic_scale, keras.Variable)
    assert keras_private.optimizer_variables(model.optimizer) == model.trainable_variables
    function = keras_private.function_per_instance(lambda x: x + 1)
    assert function._omit_frequent_tracing_warning is True
    assert "_omit_frequent_tracing_warning" in vars(tf.function(lambda x: x))
    policy = keras_private.ShadowPolicy("float32", "float32", "bfloat16")
    assert (policy.compute_dtype, policy.variable_dtype) == ("float32", "bfloat16")
    norm = keras.layers.LayerNormalization()
    norm.build((None, 3))
    assert "_autocast" in vars(dense.kernel) and "_autocast" in vars(norm.gamma)
    assert keras_private.is_autocast(dense.kernel) and not keras_private.is_autocast(norm.gamma)


def test_random_functions_and_their_dtype_arguments():
    module = keras_private.random_module()
    for name, dtype_argument in keras_private.RANDOM_FUNCTIONS.items():
        parameters = inspect.signature(getattr(module, name)).parameters
        assert "seed" in parameters, name
        if dtype_argument is not None:
            assert dtype_argument in parameters, name
    shape = keras_private.concrete_noise_shape(tf.zeros([2, 3, 4]), (None, 1, 4))
    assert [int(d) for d in shape] == [2, 1, 4]
    seeds = [v for v in _model().non_trainable_variables if keras_private.is_seed_state(v)]
    assert len(seeds) == 1


def test_train_function_around_a_step_and_unlowered_branches():
    model = _model()
    seen = []

    def step(data):
        seen.append(1)
        return model.train_step(data)

    function = keras_private.make_train_function_around(model, step)
    assert model.jit_compile is False or model._jit_compile is not None
    dataset = tf.data.Dataset.from_tensor_slices((tf.ones([4, 3]), tf.ones([4, 2]))).batch(2)
    function(iter(dataset))
    assert seen

    @tf.function
    def branch(flag):
        out = tf.cond(flag, lambda: tf.constant(1.0), lambda: tf.constant(0.0))
        keras_private.keep_branches_unlowered(out)
        ops = [op for op in tf.compat.v1.get_default_graph().get_operations() if op.type in ("If", "StatelessIf")]
        assert ops and all(not op.get_attr("_lower_using_switch_merge") for op in ops)
        return out

    assert float(branch(tf.constant(True))) == 1.0


def test_retracing_warning_switch_exists():
    function = keras_private.without_retracing_warning(tf.function(lambda x: x + 1))
    assert function._omit_frequent_tracing_warning is True


def test_train_function_is_an_untracked_attribute_fit_calls():
    """``set_train_function`` skips Keras' attribute tracking: it relies on
    Keras' train function being a plain function Keras neither tracks nor
    caches elsewhere, so ``fit`` calls whatever the attribute holds."""
    model = _model()
    model.make_train_function()
    plain = model.train_function
    assert not isinstance(plain, tf.__internal__.tracking.Trackable)
    children = set(model._trackable_children())
    calls = []

    def wrapped(iterator):
        calls.append(1)
        return plain(iterator)

    keras_private.set_train_function(model, wrapped)
    model.make_train_function()  # not forced: keeps the attribute
    assert model.train_function is wrapped
    model.fit(np.zeros((4, 3), np.float32), np.zeros((4, 2), np.float32), batch_size=2, verbose=0)
    assert len(calls) == 2
    keras_private.set_train_function(model, plain)
    assert model.train_function is plain
    assert set(model._trackable_children()) == children
