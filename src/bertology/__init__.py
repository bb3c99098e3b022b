"""bertology: intervention studies on pre-trained BERT models."""

__version__ = "0.1.0"
