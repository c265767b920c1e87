// app/build.gradle.kts: the demo app module: the Kotlin class from native/kotlin, the JNI library built by the NDK for arm64-v8a from native/ (src/main/cpp/CMakeLists.txt).
plugins {
    id("com.android.application")
    id("org.jetbrains.kotlin.android")
}

val llamaDir = providers.gradleProperty("magicselector.llamaDir").get()
val usearchDir = providers.gradleProperty("magicselector.usearchDir").get()

android {
    namespace = "com.magicselector.demo"
    compileSdk = 34
    ndkVersion = "26.3.11579264"

    defaultConfig {
        applicationId = "com.magicselector.demo"
        minSdk = 24
        targetSdk = 34
        versionCode = 1
        versionName = "0.1.0"
        ndk { abiFilters += "arm64-v8a" }
        externalNativeBuild {
            cmake {
                // ggml's int8 kernels use the dot product (Armv8.2-A): every phone core since ~2018
                arguments += listOf("-DMS_LLAMA_DIR=$llamaDir", "-DMS_USEARCH_DIR=$usearchDir",
                                    "-DANDROID_STL=c++_static", "-DGGML_CPU_ARM_ARCH=armv8.2-a+dotprod")
            }
        }
    }
    externalNativeBuild {
        cmake {
            path = file("src/main/cpp/CMakeLists.txt")
            version = "3.31.6" // native/CMakeLists.txt needs CMake 3.25 or later: install one with the SDK Manager
        }
    }
    sourceSets["main"].java.srcDirs("src/main/kotlin", "../../native/kotlin")
    compileOptions {
        sourceCompatibility = JavaVersion.VERSION_17
        targetCompatibility = JavaVersion.VERSION_17
    }
    kotlinOptions { jvmTarget = "17" }
    // the bundle ships as assets/bundle; its files are read once, copied to filesDir (see MainActivity)
    androidResources { noCompress += listOf("gguf", "usearch", "npz", "onnx", "json", "jsonl") }
}
