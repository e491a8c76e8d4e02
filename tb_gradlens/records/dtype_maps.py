"""The dtype map: the payload of a ``dtypes`` record."""

from tb_gradlens import metadata
from tb_gradlens.records import checks

FormatError = metadata.FormatError


LAYER_KEYS = ("path", "class", "policy", "compute_dtype", "variable_dtype", "output_dtype")
UNKNOWN = checks.UNKNOWN


def dtype_map(layers, variables, model_output_dtype, model_output_layer=None):
    """The JSON-ready dtype map: ``{"layers": [{LAYER_KEYS}], "variables":
    [{"path", "dtype"}], "model_output_dtype", "model_output_layer"}``; the
    last is the path of the layer whose output the step's forward pass ended
    with ("unknown" when not observed)."""
    return {
        "layers": [{k: checks.str_or_unknown(layer.get(k)) for k in LAYER_KEYS} for layer in layers],
        "variables": [{"path": str(v["path"]), "dtype": str(v["dtype"])} for v in variables],
        "model_output_dtype": checks.str_or_unknown(model_output_dtype),
        "model_output_layer": checks.str_or_unknown(model_output_layer),
    }


def read_dtype_map(obj):
    """A validated dtype map; ValueError (with what is wrong) otherwise.

    Missing layer keys read as "unknown"; wrong types are an error.
    """
    if not isinstance(obj, dict):
        raise ValueError("a dtype map must be a JSON object")
    layers = obj.get("layers", [])
    variables = obj.get("variables", [])
    if not isinstance(layers, list) or not all(isinstance(x, dict) for x in layers):
        raise ValueError("dtype map 'layers' must be a list of objects")
    if not isinstance(variables, list) or not all(isinstance(x, dict) for x in variables):
        raise ValueError("dtype map 'variables' must be a list of objects")
    out_layers = []
    for layer in layers:
        for k in LAYER_KEYS:
            if k in layer and not isinstance(layer[k], str):
                raise ValueError("dtype map layer %r must be a string" % k)
        out_layers.append({k: layer.get(k, UNKNOWN) for k in LAYER_KEYS})
    for v in variables:
        if not isinstance(v.get("path"), str) or not isinstance(v.get("dtype"), str):
            raise ValueError("dtype map variables need string 'path' and 'dtype'")
    output = obj.get("model_output_dtype", UNKNOWN)
    if not isinstance(output, str):
        raise ValueError("dtype map 'model_output_dtype' must be a string")
    out = {"layers": out_layers, "variables": [dict(v) for v in variables], "model_output_dtype": output}
    if "model_output_layer" in obj:  # maps written before it was recorded have none
        if not isinstance(obj["model_output_layer"], str):
            raise ValueError("dtype map 'model_output_layer' must be a string")
        out["model_output_layer"] = obj["model_output_layer"]
    return out
