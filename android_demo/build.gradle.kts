// build.gradle.kts: the plugin versions of the demo app (Android Gradle Plugin, Kotlin); not built in CI (no SDK there).
plugins {
    id("com.android.application") version "8.5.2" apply false
    id("org.jetbrains.kotlin.android") version "1.9.24" apply false
}
