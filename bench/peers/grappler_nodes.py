"""Peer of bench/optimize.c's node counts: TensorFlow's gradient graphs of the same models
(tf.compat.v1 graph mode, tf.gradients of the mean sparse softmax cross-entropy with
respect to every weight and bias, weights as placeholders) before and after grappler:
  mlp         MLP 784-512-512-10 (ReLU), batch 128
  lenet_NHWC  LeNet-5 (28x28x1, valid 5x5x6 conv, 2x2 max pool, 5x5x16 conv, 2x2 max pool,
              fc 120, fc 84, fc 10), batch 64
  name=tf_grappler_nodes model=... before=N after=N
before: the nodes the gradients need (graph_util.extract_sub_graph); after: the graph
grappler returns (tf_optimizer.OptimizeGraph on the exported meta graph, the gradients as
the fetches, TF's default rewriter config).
Usage: grappler_nodes.py
"""
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2
from tensorflow.python.grappler import tf_optimizer

MODELS = {  # name: (batch, input shape (NHWC), weight shapes (HWIO filters, [in, out] dense))
    "mlp": (128, (784,), [(784, 512), (512, 512), (512, 10)]),
    "lenet_NHWC": (64, (28, 28, 1), [(5, 5, 1, 6), (5, 5, 6, 16), (256, 120), (120, 84), (84, 10)]),
}


def logits(params, x):
    h, layer = x, 0
    if len(x.shape) == 4:
        for layer in (0, 2):
            h = tf.nn.conv2d(h, params[layer], strides=1, padding="VALID")
            h = tf.nn.relu(tf.nn.bias_add(h, params[layer + 1]))
            h = tf.nn.max_pool2d(h, ksize=2, strides=2, padding="VALID")
        h = tf.reshape(h, [-1, 4 * 4 * 16])
        layer = 4
    for layer in range(layer, len(params), 2):
        h = tf.nn.bias_add(tf.matmul(h, params[layer]), params[layer + 1])
        if layer + 2 < len(params):
            h = tf.nn.relu(h)
    return h


def counts(model):
    batch, input_shape, weights = MODELS[model]
    graph = tf.Graph()
    with graph.as_default():
        params = []
        for shape in weights:
            params += [tf.compat.v1.placeholder(tf.float32, shape), tf.compat.v1.placeholder(tf.float32, shape[-1:])]
        x = tf.compat.v1.placeholder(tf.float32, (batch,) + input_shape, name="x")
        labels = tf.compat.v1.placeholder(tf.int32, (batch,), name="labels")
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits(params, x)))
        grads = tf.compat.v1.gradients(loss, params)
        fetches = [g.op.name for g in grads]
        for g in grads:
            graph.add_to_collection("train_op", g)
        meta = tf.compat.v1.train.export_meta_graph(graph=graph)
    before = tf.compat.v1.graph_util.extract_sub_graph(graph.as_graph_def(), fetches)
    after = tf_optimizer.OptimizeGraph(config_pb2.ConfigProto(), meta)
    return len(before.node), len(after.node)


def main():
    for model in MODELS:
        before, after = counts(model)
        print(f"name=tf_grappler_nodes model={model} before={before} after={after}", flush=True)


if __name__ == "__main__":
    main()
