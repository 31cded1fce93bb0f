"""Models to try texscope on: the bundled examples, the zoo, and the
MediaPipe corpus of published models."""
