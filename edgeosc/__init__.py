"""edgeosc: keyword spotting on the edge with softmax-free oscillator attention.

The package reads as the pipeline, each layer importing only from the layers above it in this list
(tests/test_layers.py holds the code to it):

    config, io, cbuild      typed configs; atomic writes; where the C trees are and how to build them
    frontend, integer,      the front end's maths (numpy); the integer reference of every int8 kernel and
    runtime                 its core parameter schema; running .tflite / .onnx files (torch-free)
    features, data          log-mel / MFCC in torch; datasets, splits, augmentation
    models, dynamics        oscillator, softmax and Kuramoto attention; the KWS networks
    quant                   Brevitas QAT
    checkpoint              save, load, check
    evaluate, robustness    accuracy of any model or export; of a model under other channels
    train, mining           the training loop (float and QAT); always-on detectors' false alarms as training data
    export                  onnx/, tflite/, c/: one package per target, parity
    bench, report           latency, cycle and energy estimates; the report
    stages, sweep, stream,  the pipeline's stages, sweeps, always-on listening and its evaluation over a long
    stream_eval, deploy,    recording, the Raspberry Pi bundle and its check on an emulated arm64 userland
    pi_check
    pipeline, cli           the staged pipeline and the command line
"""
